-- Fleet-wide limits (QueuePolicy.max_active, rate_limit): the rate limit's
-- token bucket, kept with its queue and written by the claims that take from
-- it (tenure.core.limits). NULL: a full bucket.
ALTER TABLE queues ADD COLUMN rate_tokens REAL;
ALTER TABLE queues ADD COLUMN rate_at REAL;
