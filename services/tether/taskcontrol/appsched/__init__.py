"""Reference application-level schedulers: `tether appsched rolling|replicas|gang`."""
