"""Admission: the entitlement trees' queues, fair share and preemption, decided by the leader of
the shard that holds each tree."""
