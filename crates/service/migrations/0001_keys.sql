-- Keys: a public id, the SHA-256 of the secret (never the secret), the budget it shares.
CREATE TABLE keys (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    label TEXT NOT NULL,
    budget TEXT NOT NULL,
    address TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX keys_by_address ON keys (address, created_at);
CREATE INDEX keys_by_budget ON keys (budget);

-- Proof-of-work challenges: single use, with an expiry.
CREATE TABLE challenges (
    challenge TEXT PRIMARY KEY,
    address TEXT NOT NULL,
    difficulty BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- Usage per key, UTC day and model. `requests` are the requests admitted and charged.
CREATE TABLE usage_days (
    key_id TEXT NOT NULL,
    day BIGINT NOT NULL,
    model TEXT NOT NULL,
    requests BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    errors BIGINT NOT NULL,
    rate_limited BIGINT NOT NULL,
    PRIMARY KEY (key_id, day, model)
);

-- Each request of a key: when, which model, how it ended and the server time.
CREATE TABLE requests (
    id TEXT PRIMARY KEY,
    key_id TEXT NOT NULL,
    at BIGINT NOT NULL,
    model TEXT NOT NULL,
    status BIGINT NOT NULL,
    code TEXT,
    server_ms BIGINT NOT NULL,
    input_tokens BIGINT NOT NULL
);
CREATE INDEX requests_by_key ON requests (key_id, at);
