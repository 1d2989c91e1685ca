"""Tests that run several real processes: ranks of a distributed job, processes sharing a shard cache,
JAX hosts, and ranks killed with their DataLoader workers. Scripts the tests start sit next to them."""
