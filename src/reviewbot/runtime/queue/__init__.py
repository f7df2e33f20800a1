"""The merge queue's runtime: the driver, one pass over a queue, building cars, the codec."""
