-- What each router's admission queue of a model is asked for, per address (places held and
-- waited for, as JSON), refreshed several times a second: every router sharing this database
-- takes its part of the model's places from the sum. Rows of routers that stopped refreshing
-- are ignored and replaced.
CREATE TABLE admission_demand (
    router TEXT NOT NULL,
    model TEXT NOT NULL,
    demand TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (router, model)
);
