"""The TaskControllerRegistry service: where application-level schedulers register."""
