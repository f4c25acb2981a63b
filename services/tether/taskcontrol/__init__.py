"""TaskControl: application-level schedulers approving disruptive operations on their tasks."""
