"""The harvest simulator's parts: capacity traces of harvest machines."""
