"""Replication: a master's HAService streams its CommitLog to its slaves'
HAClients byte for byte (protocol.py defines the stream); SlaveSynchronize
copies the master's metadata (topics, consumer and delay offsets)."""
