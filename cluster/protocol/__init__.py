"""The broker's wire protocol.

Client APIs (Produce, Fetch, Metadata, ...) reuse kafka-python's protocol
classes, built from Kafka's JSON schemas (`api.py`); the controller->broker
requests have their own codec (`control.py`, owned by the controller). Both
share Kafka's framing: int32 size, request header v1, response header v0
(`frame.py`). `records.py` converts between the message formats clients send
or expect (magic 0/1 MessageSets) and the RecordBatch v2 the log stores.
"""
