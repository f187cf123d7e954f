"""great-expectations suites run as gates between stages."""
