-- Key creations per address, kept apart from the keys: deleting a key with its data must not
-- give its address the creation back, nor a fresh budget. Rows older than two days are
-- pruned as keys are created.
CREATE TABLE key_creations (
    address TEXT NOT NULL,
    budget TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX key_creations_by_address ON key_creations (address, created_at);
CREATE INDEX key_creations_by_time ON key_creations (created_at);
INSERT INTO key_creations (address, budget, created_at) SELECT address, budget, created_at FROM keys;
