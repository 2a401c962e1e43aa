"""Messaging on one store: RocketMQ's broker services (send path, schedule, transactions,
consumer groups, orderly locks). Built on ``rocketstore.store``."""
