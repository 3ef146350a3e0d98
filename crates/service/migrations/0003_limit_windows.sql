-- What every router sharing this database has been granted of a limit in one window (a
-- minute or a UTC day): routers take leases of a few requests and tokens from here and give
-- back what they did not use. Rows of past windows are pruned.
CREATE TABLE limit_windows (
    subject TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    tokens BIGINT NOT NULL,
    PRIMARY KEY (subject, window_start)
);
CREATE INDEX limit_windows_by_start ON limit_windows (window_start);
