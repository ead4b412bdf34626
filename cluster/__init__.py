"""chaoslog's system under test: a Kafka-0.8-design broker and controller."""
