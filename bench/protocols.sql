/*
 * bench/protocols.sql: the reference lease protocols the benchmark compares
 * leader_election with (../shared/docs/PERFORMANCE.md, "What a user would
 * pick instead").  Each lives in its own schema over its own table and
 * exposes the same two plan-cached PL/pgSQL functions:
 *
 *   <schema>.le_try(name, holder, ttl) -> boolean   acquire or renew
 *   <schema>.le_am(name, holder)       -> boolean   do I hold a valid lease?
 *
 * They are written the way an application author would write them, with the
 * database clock (now()) as the time source.  PL/pgSQL caches the plan of
 * every statement per session, so none re-plans per call.
 *
 * select1 has no functions: its pgbench script is a bare SELECT 1, the round
 * trip that bounds every call from below.
 *
 * naive is not a reference: it is floor turned into a protocol the obvious
 * wrong way (read, then write without a lock).  The correctness pass uses it
 * to show that its overlap check catches a protocol that elects two leaders.
 */

-- A common shape for the table protocols' am-I-leader check.
-- (Each schema gets its own copy so that every protocol's plan reads its own table.)

/* ---- seed_kotlin: SELECT ... FOR UPDATE; insert if absent; renew if mine; take over if expired ---- */
CREATE SCHEMA seed_kotlin;
CREATE TABLE seed_kotlin.leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE FUNCTION seed_kotlin.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    cur seed_kotlin.leases;
BEGIN
    SELECT * INTO cur FROM seed_kotlin.leases WHERE name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        -- Two first-comers may race here: the loser's insert does nothing.
        INSERT INTO seed_kotlin.leases VALUES (p_name, p_holder, now() + p_ttl)
            ON CONFLICT (name) DO NOTHING;
        RETURN FOUND;
    END IF;
    IF cur.holder = p_holder OR cur.expires_at < now() THEN
        UPDATE seed_kotlin.leases SET holder = p_holder, expires_at = now() + p_ttl
         WHERE name = p_name;
        RETURN true;
    END IF;
    RETURN false;
END $$;
CREATE FUNCTION seed_kotlin.le_am(p_name text, p_holder text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM seed_kotlin.leases
                    WHERE name = p_name AND holder = p_holder AND expires_at > now());
END $$;

/* ---- upsert: one INSERT ... ON CONFLICT DO UPDATE ... WHERE mine OR expired ---- */
CREATE SCHEMA upsert;
CREATE TABLE upsert.leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE FUNCTION upsert.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO upsert.leases AS l VALUES (p_name, p_holder, now() + p_ttl)
        ON CONFLICT (name) DO UPDATE
           SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE l.holder = excluded.holder OR l.expires_at < now();
    RETURN FOUND;
END $$;
CREATE FUNCTION upsert.le_am(p_name text, p_holder text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM upsert.leases
                    WHERE name = p_name AND holder = p_holder AND expires_at > now());
END $$;

/* ---- shedlock: UPDATE ... WHERE expired OR mine, then INSERT ... ON CONFLICT DO NOTHING ---- */
CREATE SCHEMA shedlock;
CREATE TABLE shedlock.leases (
    name       text PRIMARY KEY,
    lock_until timestamptz NOT NULL,
    locked_at  timestamptz NOT NULL,
    locked_by  text NOT NULL
);
CREATE FUNCTION shedlock.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE shedlock.leases SET lock_until = now() + p_ttl, locked_at = now(), locked_by = p_holder
     WHERE name = p_name AND (lock_until <= now() OR locked_by = p_holder);
    IF FOUND THEN
        RETURN true;
    END IF;
    INSERT INTO shedlock.leases VALUES (p_name, now() + p_ttl, now(), p_holder)
        ON CONFLICT (name) DO NOTHING;
    RETURN FOUND;
END $$;
CREATE FUNCTION shedlock.le_am(p_name text, p_holder text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM shedlock.leases
                    WHERE name = p_name AND locked_by = p_holder AND lock_until > now());
END $$;

/* ---- advisory: a session-level advisory lock on hashtext(name); no table, no TTL ---- */
CREATE SCHEMA advisory;
CREATE FUNCTION advisory.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- Re-entrant: the session that holds the lock gets true again (and one
    -- more count on the lock), which is how a holder "renews".
    RETURN pg_try_advisory_lock(hashtext(p_name));
END $$;
CREATE FUNCTION advisory.le_am(p_name text, p_holder text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    k bigint := hashtext(p_name);
BEGIN
    -- The only way SQL can tell whether this session holds the lock.
    RETURN EXISTS (SELECT 1 FROM pg_locks
                    WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                      AND classid = ((k >> 32) & 4294967295)::oid
                      AND objid = (k & 4294967295)::oid AND objsubid = 1);
END $$;

/* ---- floor: one unconditional UPDATE of one row by primary key ---- */
CREATE SCHEMA floor;
CREATE TABLE floor.leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE FUNCTION floor.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    -- Not a protocol: the cost of one durable write.  Rows are pre-created.
    UPDATE floor.leases SET holder = p_holder, expires_at = now() + p_ttl WHERE name = p_name;
    RETURN true;
END $$;
CREATE FUNCTION floor.le_am(p_name text, p_holder text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM floor.leases
                    WHERE name = p_name AND holder = p_holder AND expires_at > now());
END $$;

/* ---- naive: floor with a read-then-write check and no lock (deliberately wrong) ---- */
CREATE SCHEMA naive;
CREATE TABLE naive.leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE FUNCTION naive.le_try(p_name text, p_holder text, p_ttl interval)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    cur naive.leases;
BEGIN
    SELECT * INTO cur FROM naive.leases WHERE name = p_name;   -- no FOR UPDATE
    IF cur.holder = p_holder OR cur.expires_at < now() THEN
        UPDATE naive.leases SET holder = p_holder, expires_at = now() + p_ttl WHERE name = p_name;
        RETURN true;
    END IF;
    RETURN false;
END $$;

/*
 * The correctness pass: every win, logged by the winning transaction itself.
 * t_start is now() (the transaction start, never later than the time the
 * lease's expiry was computed from), t_won the clock right after the call
 * returned true.  The winner may rely on the lease over [t_won, t_start+ttl):
 * a protocol is correct only if no two holders' intervals ever overlap.
 */
CREATE SCHEMA bench;
CREATE TABLE bench.wins (
    protocol text NOT NULL,
    holder   text NOT NULL,
    t_start  timestamptz NOT NULL,
    t_won    timestamptz NOT NULL,
    ttl      interval NOT NULL
);
