"""The web dashboard at /ui: server-rendered pages (Jinja2) that htmx refreshes as events come."""
