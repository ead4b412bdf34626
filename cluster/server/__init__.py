"""The broker's data plane: socket server, request handling (KafkaApis),
replica management, replica fetchers, purgatory, metadata cache, producer state
and the ZooKeeper wrapper. See replica_manager.py for the concurrency model."""
