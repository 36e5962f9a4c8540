-- The trace context (a W3C traceparent) of the job's enqueue, when the
-- producer was traced: its attempts run in child spans (tenure.traces).
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
