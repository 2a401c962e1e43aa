"""Producers and consumers (RocketMQ's client) over a transport interface."""
