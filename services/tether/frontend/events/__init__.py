"""The region's event stream: changes in the store, told as events to whoever follows them."""
