"""A differential run of public API sequences against awa-pg 0.6.9 and this package."""
