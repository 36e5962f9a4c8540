-- The trace context (a W3C traceparent) of the job's enqueue, when the
-- producer was traced: its attempts run in child spans (tenure.traces).
-- Nullable without a default: no table rewrite.
ALTER TABLE {schema}.jobs ADD COLUMN traceparent text;
