"""The Redis backend: jobs in Redis, every transition one Lua script."""

from tenure.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
