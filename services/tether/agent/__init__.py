"""The agent: runs the tasks assigned to its machine under supervisor shims and reports status."""
