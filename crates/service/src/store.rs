//! Storage through sqlx: SQLite by default (a file, WAL), PostgreSQL by URL. One schema,
//! written in the SQL both accept; migrations run at open. Everything a restart must keep
//! (keys, challenges, usage, the request log) lives here.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor, Row};

use crate::clock::Millis;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("database migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("unsupported database URL {0:?}: use sqlite:// or postgres://")]
    Url(String),
}

/// A key as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx_macros::FromRow)]
pub struct KeyRow {
    pub id: String,
    pub hash: String,
    pub prefix: String,
    pub label: String,
    pub budget: String,
    pub address: String,
    pub status: String,
    pub created_at: Millis,
}

/// One day's counts of a key on a model.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx_macros::FromRow)]
pub struct DayRow {
    pub day: i64,
    pub model: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub errors: i64,
    pub rate_limited: i64,
}

/// One logged request.
#[derive(Debug, Clone, PartialEq, Eq, sqlx_macros::FromRow)]
pub struct RequestRow {
    pub at: Millis,
    pub model: String,
    pub status: i64,
    pub code: Option<String>,
    pub server_ms: i64,
    pub input_tokens: i64,
}

/// `sql` (`KEY_INSERT` or `KEY_IMPORT`) with a key row's eight values bound.
fn key_insert<'q>(
    sql: &'static str,
    k: &'q KeyRow,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(&k.id)
        .bind(&k.hash)
        .bind(&k.prefix)
        .bind(&k.label)
        .bind(&k.budget)
        .bind(&k.address)
        .bind(&k.status)
        .bind(k.created_at)
}

const KEY_INSERT: &str =
    "INSERT INTO keys (id, hash, prefix, label, budget, address, status, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
const KEY_IMPORT: &str =
    "INSERT INTO keys (id, hash, prefix, label, budget, address, status, created_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (hash) DO NOTHING";

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    pub postgres: bool,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx_macros::migrate!("./migrations");

impl Store {
    /// Open (creating a SQLite file if needed) and migrate.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let sqlite = url.starts_with("sqlite:");
        if !postgres && !sqlite {
            return Err(StoreError::Url(url.to_string()));
        }
        let url = if sqlite && !url.contains("mode=") && !url.contains(":memory:") {
            format!("{url}{}mode=rwc", if url.contains('?') { "&" } else { "?" })
        } else {
            url.to_string()
        };
        let opts = AnyConnectOptions::from_str(&url)?;
        let pool = AnyPoolOptions::new()
            .max_connections(if postgres { 16 } else { 4 })
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        // WAL: readers never wait for the writer; NORMAL: a commit survives
                        // the process being killed (not a power cut).
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                        conn.execute("PRAGMA busy_timeout = 10000").await?;
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(Store { pool, postgres })
    }

    /// The SQLite URL of a file in `dir`.
    pub fn sqlite_url(dir: &std::path::Path) -> String {
        format!("sqlite://{}", dir.join("service.sqlite").display())
    }

    pub async fn add_challenge(
        &self,
        challenge: &str,
        address: &str,
        difficulty: u32,
        expires_at: Millis,
        now: Millis,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM challenges WHERE expires_at < $1")
            .bind(now)
            .execute(&self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO challenges (challenge, address, difficulty, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(challenge)
        .bind(address)
        .bind(difficulty as i64)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Use a challenge: it is gone afterwards. Its difficulty, if it existed and was live.
    pub async fn take_challenge(
        &self,
        challenge: &str,
        now: Millis,
    ) -> Result<Option<u32>, StoreError> {
        let row = sqlx::query(
            "DELETE FROM challenges WHERE challenge = $1 RETURNING difficulty, expires_at",
        )
        .bind(challenge)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|r| {
            let d: i64 = r.try_get("difficulty").ok()?;
            let e: i64 = r.try_get("expires_at").ok()?;
            (e >= now).then_some(d as u32)
        }))
    }

    /// Keys created from an address since `since`.
    pub async fn keys_created(
        &self,
        address: &str,
        since: Millis,
    ) -> Result<Vec<Millis>, StoreError> {
        let rows = sqlx::query(
            "SELECT created_at FROM key_creations WHERE address = $1 AND created_at >= $2 \
             ORDER BY created_at",
        )
        .bind(address)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .filter_map(|r| r.try_get::<i64, _>("created_at").ok())
            .collect())
    }

    /// The budget of the oldest key an address created since `since`, if any.
    pub async fn shared_budget(
        &self,
        address: &str,
        since: Millis,
    ) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(
            "SELECT budget FROM key_creations WHERE address = $1 AND created_at >= $2 \
             ORDER BY created_at LIMIT 1",
        )
        .bind(address)
        .bind(since)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|r| r.try_get("budget").ok()))
    }

    /// Store a key, and its creation in the address's log (pruning entries over two days old).
    pub async fn insert_key(&self, k: &KeyRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM key_creations WHERE created_at < $1")
            .bind(k.created_at - 2 * crate::clock::DAY_MS)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO key_creations (address, budget, created_at) VALUES ($1, $2, $3)")
            .bind(&k.address)
            .bind(&k.budget)
            .bind(k.created_at)
            .execute(&mut *tx)
            .await?;
        key_insert(KEY_INSERT, k).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Store a key brought from elsewhere (an older site's): the key alone, no creation in
    /// any address's log. `false` when a key with that hash is already stored.
    pub async fn import_key(&self, k: &KeyRow) -> Result<bool, StoreError> {
        let done = key_insert(KEY_IMPORT, k).execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn key_by_hash(&self, hash: &str) -> Result<Option<KeyRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT id, hash, prefix, label, budget, address, status, created_at FROM keys WHERE hash = $1",
        )
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn revoke(&self, id: &str, now: Millis) -> Result<(), StoreError> {
        sqlx::query("UPDATE keys SET status = 'revoked', revoked_at = $2 WHERE id = $1")
            .bind(id)
            .bind(now)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Delete every row of a key: its request log, its usage and the key itself.
    pub async fn forget(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for sql in [
            "DELETE FROM requests WHERE key_id = $1",
            "DELETE FROM usage_days WHERE key_id = $1",
            "DELETE FROM keys WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Rows that still mention a key, in every table (for tests and audits).
    pub async fn rows_of(&self, id: &str) -> Result<i64, StoreError> {
        let mut n = 0;
        for sql in [
            "SELECT COUNT(*) AS n FROM requests WHERE key_id = $1",
            "SELECT COUNT(*) AS n FROM usage_days WHERE key_id = $1",
            "SELECT COUNT(*) AS n FROM keys WHERE id = $1",
        ] {
            let r = sqlx::query(sql).bind(id).fetch_one(&self.pool).await?;
            n += r.try_get::<i64, _>("n")?;
        }
        Ok(n)
    }

    /// Add to a key's counts of a day and model, and log the request when `log` is given.
    pub async fn record(
        &self,
        key_id: &str,
        d: &DayRow,
        log: Option<(&str, &RequestRow)>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO usage_days (key_id, day, model, requests, input_tokens, output_tokens, errors, rate_limited) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (key_id, day, model) DO UPDATE SET \
             requests = usage_days.requests + excluded.requests, \
             input_tokens = usage_days.input_tokens + excluded.input_tokens, \
             output_tokens = usage_days.output_tokens + excluded.output_tokens, \
             errors = usage_days.errors + excluded.errors, \
             rate_limited = usage_days.rate_limited + excluded.rate_limited",
        )
        .bind(key_id)
        .bind(d.day)
        .bind(&d.model)
        .bind(d.requests)
        .bind(d.input_tokens)
        .bind(d.output_tokens)
        .bind(d.errors)
        .bind(d.rate_limited)
        .execute(&mut *tx)
        .await?;
        if let Some((id, r)) = log {
            sqlx::query(
                "INSERT INTO requests (id, key_id, at, model, status, code, server_ms, input_tokens) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(id)
            .bind(key_id)
            .bind(r.at)
            .bind(&r.model)
            .bind(r.status)
            .bind(r.code.clone())
            .bind(r.server_ms)
            .bind(r.input_tokens)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A budget's counts on a model and day, over all its keys: (requests, tokens).
    pub async fn budget_day(
        &self,
        budget: &str,
        model: &str,
        day: i64,
    ) -> Result<(u64, u64), StoreError> {
        let r = sqlx::query(
            "SELECT CAST(COALESCE(SUM(u.requests), 0) AS BIGINT) AS r, \
                    CAST(COALESCE(SUM(u.input_tokens + u.output_tokens), 0) AS BIGINT) AS t \
             FROM usage_days u JOIN keys k ON k.id = u.key_id \
             WHERE k.budget = $1 AND u.model = $2 AND u.day = $3",
        )
        .bind(budget)
        .bind(model)
        .bind(day)
        .fetch_one(&self.pool)
        .await?;
        Ok((
            r.try_get::<i64, _>("r")?.max(0) as u64,
            r.try_get::<i64, _>("t")?.max(0) as u64,
        ))
    }

    /// A key's day rows from `from_day` on.
    pub async fn days(&self, key_id: &str, from_day: i64) -> Result<Vec<DayRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT day, model, requests, input_tokens, output_tokens, errors, rate_limited \
             FROM usage_days WHERE key_id = $1 AND day >= $2 ORDER BY day, model",
        )
        .bind(key_id)
        .bind(from_day)
        .fetch_all(&self.pool)
        .await?)
    }

    /// A key's logged requests since `since`, newest first, at most `limit`.
    pub async fn recent(
        &self,
        key_id: &str,
        since: Millis,
        limit: i64,
    ) -> Result<Vec<RequestRow>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT at, model, status, code, server_ms, input_tokens FROM requests \
             WHERE key_id = $1 AND at >= $2 ORDER BY at DESC LIMIT $3",
        )
        .bind(key_id)
        .bind(since)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Grant `requests` and `tokens` of a limit's window if the window's total stays within
    /// `max_requests` and `max_tokens` (all or nothing, atomically against every other
    /// router); the window's totals after the grant, or `None` when it would not fit.
    pub async fn lease(
        &self,
        subject: &str,
        window_start: Millis,
        want: (i64, i64),
        max: (i64, i64),
    ) -> Result<Option<(i64, i64)>, StoreError> {
        sqlx::query(
            "INSERT INTO limit_windows (subject, window_start, requests, tokens) \
             VALUES ($1, $2, 0, 0) ON CONFLICT (subject, window_start) DO NOTHING",
        )
        .bind(subject)
        .bind(window_start)
        .execute(&self.pool)
        .await?;
        let row = sqlx::query(
            "UPDATE limit_windows SET requests = requests + $3, tokens = tokens + $4 \
             WHERE subject = $1 AND window_start = $2 AND requests + $3 <= $5 \
             AND tokens + $4 <= $6 RETURNING requests, tokens",
        )
        .bind(subject)
        .bind(window_start)
        .bind(want.0)
        .bind(want.1)
        .bind(max.0)
        .bind(max.1)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => Some((r.try_get("requests")?, r.try_get("tokens")?)),
            None => None,
        })
    }

    /// A window's totals (what every router was granted).
    pub async fn window(
        &self,
        subject: &str,
        window_start: Millis,
    ) -> Result<(i64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT requests, tokens FROM limit_windows WHERE subject = $1 AND window_start = $2",
        )
        .bind(subject)
        .bind(window_start)
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => (r.try_get("requests")?, r.try_get("tokens")?),
            None => (0, 0),
        })
    }

    /// Give back what a lease did not use.
    pub async fn give_back(
        &self,
        subject: &str,
        window_start: Millis,
        requests: i64,
        tokens: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE limit_windows SET requests = requests - $3, tokens = tokens - $4 \
             WHERE subject = $1 AND window_start = $2",
        )
        .bind(subject)
        .bind(window_start)
        .bind(requests)
        .bind(tokens)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Forget windows that started before `before`.
    pub async fn prune_windows(&self, before: Millis) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM limit_windows WHERE window_start < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Say what this router's queue of `model` is asked for (JSON: address → places).
    pub async fn put_demand(
        &self,
        router: &str,
        model: &str,
        demand: &str,
        now: Millis,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO admission_demand (router, model, demand, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (router, model) \
             DO UPDATE SET demand = $3, updated_at = $4",
        )
        .bind(router)
        .bind(model)
        .bind(demand)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every router's demand on `model` refreshed since `since`: (router, JSON).
    pub async fn demands(
        &self,
        model: &str,
        since: Millis,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT router, demand FROM admission_demand WHERE model = $1 AND updated_at >= $2",
        )
        .bind(model)
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("router")?, r.try_get("demand")?)))
            .collect()
    }
}
