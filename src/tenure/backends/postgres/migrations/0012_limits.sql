-- Fleet-wide limits (QueuePolicy.max_active, rate_limit): the rate limit's
-- token bucket, kept with its queue and written by the claims that take from
-- it, under the queue row's lock (see complete_and_claim). NULL: a full bucket.
ALTER TABLE {schema}.queues ADD COLUMN rate_tokens double precision,
                            ADD COLUMN rate_at double precision;
