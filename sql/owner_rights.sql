--
-- owner_rights: code an administrator adds to the extension's tables runs
-- with the tables' owner's rights (usually a superuser's) in the caller's
-- session.  A caller with the README's grants must not be able to make it
-- run code of the caller's choosing: not through a temporary table, view
-- or type standing in for one it names, not through its search_path
-- (owner_rights.c, O1 and O2).
--
-- Roles are cluster-wide: all are created and dropped here.
--
TRUNCATE leader_election.leases, leader_election.history;
RESET leader_election.holder_id;
SELECT current_user AS regress_superuser \gset

CREATE ROLE regress_le_tenant LOGIN;
GRANT EXECUTE ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), leader_term(text, text), current_leader(text)
   TO regress_le_tenant;
GRANT USAGE ON SCHEMA leader_election TO regress_le_tenant;
-- A tenant with a schema of its own, which it may put on its search_path.
CREATE SCHEMA regress_le_tenant_schema AUTHORIZATION regress_le_tenant;

-- The administrator's schema: an audit table and its helpers.
CREATE SCHEMA regress_le_admin;
CREATE TABLE regress_le_admin.audit_log (name text, by_role text, search_path text);
CREATE FUNCTION regress_le_admin.audit_label(n text) RETURNS text
    LANGUAGE sql AS $$ SELECT 'lease ' || n $$;
CREATE TABLE regress_le_admin.term_rules (max_term bigint);
INSERT INTO regress_le_admin.term_rules VALUES (1000000);

-- Written as the README asks: every name qualified.  Records who it ran as.
CREATE FUNCTION regress_le_admin.audit_qualified() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_le_admin.audit_log
    VALUES (regress_le_admin.audit_label(NEW.name), current_user,
            pg_catalog.current_setting('search_path'));
    RETURN NEW;
END $$;
-- Written carelessly: an unqualified table.
CREATE FUNCTION regress_le_admin.audit_unqualified_table() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO audit_log VALUES (NEW.name, current_user, current_setting('search_path'));
    RETURN NEW;
END $$;
-- Written carelessly: an unqualified function.
CREATE FUNCTION regress_le_admin.audit_unqualified_function() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_le_admin.audit_log VALUES (audit_label(NEW.name), current_user, '');
    RETURN NEW;
END $$;
-- A CHECK on the history (whose rows are written without the executor)
-- whose function reads an unqualified table.
CREATE FUNCTION regress_le_admin.term_allowed(t bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN t <= (SELECT max(max_term) FROM term_rules);
END $$;
-- Added code that tries to change the session.
CREATE FUNCTION regress_le_admin.audit_makes_temp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    CREATE TEMP TABLE regress_le_scratch (x int);
    RETURN NEW;
END $$;

-- Is the tenant a superuser?  Is there a row for the name?
CREATE FUNCTION regress_le_admin.escalated() RETURNS boolean
    LANGUAGE sql AS $$ SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'regress_le_tenant' $$;
CREATE FUNCTION regress_le_admin.leased(n text) RETURNS boolean
    LANGUAGE sql AS $$ SELECT count(*) > 0 FROM leader_election.leases AS l WHERE l.name = n $$;
GRANT USAGE ON SCHEMA regress_le_admin TO PUBLIC;
GRANT EXECUTE ON FUNCTION regress_le_admin.escalated() TO PUBLIC;

--
-- 1. Without added code, a session with temporary tables is served.
--
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
SELECT try_acquire_leader('plain', '1 minute', 't1') AS plain_with_temp_table;
\c - :regress_superuser

--
-- 2. A trigger that names its table without a schema, and a tenant's
--    temporary table of that name with a trigger of the tenant's: the
--    tenant's code would run as the owner.  Refused: 42501, nothing written.
--
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_unqualified_table();
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
CREATE FUNCTION pg_temp.grab() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN NEW;
END $$;
CREATE TRIGGER grab BEFORE INSERT ON pg_temp.audit_log
    FOR EACH ROW EXECUTE FUNCTION pg_temp.grab();
SELECT pg_temp.try($$SELECT try_acquire_leader('stand-in', '1 minute', 't1')$$) AS temp_table_stand_in;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
-- A temporary view, or a type, stands in as well as a table.
DROP TABLE audit_log;
CREATE TEMP VIEW audit_log AS SELECT 'x'::text AS name, 'y'::text AS by_role, 'z'::text AS search_path;
SELECT pg_temp.try($$SELECT try_acquire_leader('stand-in', '1 minute', 't1')$$) AS temp_view_stand_in;
DROP VIEW audit_log;
CREATE TYPE pg_temp.some_type AS (a int);
SELECT pg_temp.try($$SELECT try_acquire_leader('stand-in', '1 minute', 't1')$$) AS temp_type;
-- Without temporary tables, views or types (temporary functions are never
-- looked up without their schema) the call runs; the careless trigger then
-- finds no table: search_path is pg_catalog, pg_temp inside.
DISCARD TEMP;
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
SELECT pg_temp.try($$SELECT try_acquire_leader('stand-in', '1 minute', 't1')$$) AS careless_trigger_fails_closed;
\c - :regress_superuser
SELECT regress_le_admin.leased('stand-in') AS stand_in_written;
DROP TRIGGER regress_audit ON leader_election.leases;

--
-- 3. A trigger that calls a function without a schema, and a tenant whose
--    search_path finds its own function of that name first.
--
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_unqualified_function();
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE FUNCTION regress_le_tenant_schema.audit_label(n text) RETURNS text
    LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN n;
END $$;
SET search_path = regress_le_tenant_schema, regress_le_admin, public;
SELECT pg_temp.try($$SELECT public.try_acquire_leader('path', '1 minute', 't1')$$) AS search_path_stand_in;
RESET search_path;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
\c - :regress_superuser
SELECT regress_le_admin.leased('path') AS path_written;
DROP TRIGGER regress_audit ON leader_election.leases;

--
-- 4. A CHECK constraint on the history, evaluated by the direct write
--    path, whose function reads a table without a schema; the tenant's
--    temporary view of that name would call the tenant's function as the
--    owner.
--
SET search_path = public, regress_le_admin;   -- the administrator's own path
ALTER TABLE leader_election.history ADD CONSTRAINT regress_term_allowed
    CHECK (regress_le_admin.term_allowed(term));
RESET search_path;
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE FUNCTION pg_temp.grab_value() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN 1000000;
END $$;
CREATE TEMP VIEW term_rules AS SELECT pg_temp.grab_value() AS max_term;
SELECT pg_temp.try($$SELECT try_acquire_leader('check', '1 minute', 't1')$$) AS check_stand_in;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
\c - :regress_superuser
SELECT regress_le_admin.leased('check') AS check_written;
ALTER TABLE leader_election.history DROP CONSTRAINT regress_term_allowed;

--
-- 5. Added code written as the README asks runs, as the owner, with
--    search_path pg_catalog, pg_temp, for a session whose temporary
--    objects are functions only (the regression helpers).
--
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_qualified();
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
SELECT pg_temp.try($$SELECT try_acquire_leader('audited', '1 minute', 't1')$$) AS audited;
SELECT pg_temp.try($$SELECT try_acquire_leader('audited', '1 minute', 't1')$$) AS audited_renewal;
SELECT pg_temp.try($$SELECT release_leader('audited', 't1')$$) AS audited_release;
\c - :regress_superuser
SELECT name, by_role = (SELECT relowner::regrole::text FROM pg_class
                         WHERE oid = 'leader_election.leases'::regclass) AS as_owner,
       search_path
  FROM regress_le_admin.audit_log ORDER BY name;
DROP TRIGGER regress_audit ON leader_election.leases;

--
-- 6. Added code runs as a security-restricted operation: it cannot create
--    temporary objects (or SET ROLE) in the caller's session.
--
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_makes_temp();
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
SELECT pg_temp.try($$SELECT try_acquire_leader('scratch', '1 minute', 't1')$$) AS makes_temp;
\c - :regress_superuser
DROP TRIGGER regress_audit ON leader_election.leases;

--
-- 7. Code added to the other tables the extension writes counts too: the
--    term eras, and the task runner's tables.
--
CREATE FUNCTION regress_le_admin.noop() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NEW;
END $$;
CREATE TRIGGER regress_noop AFTER INSERT ON leader_election.term_era
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.noop();
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
SELECT pg_temp.try($$SELECT try_acquire_leader('era', '1 minute', 't1')$$) AS trigger_on_term_era;
\c - :regress_superuser
DROP TRIGGER regress_noop ON leader_election.term_era;
CREATE TRIGGER regress_noop AFTER INSERT ON leader_election.tasks
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.noop();
CREATE PROCEDURE regress_le_admin.job() LANGUAGE sql AS $$ SELECT 1 $$;
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
SELECT pg_temp.try($$SELECT leader_election.register_task('regress-job', 'regress_le_admin.job()', '1 hour', '1 minute') > 0$$) AS trigger_on_tasks;
-- Without the temporary table the call gets past that check, to the task
-- runner's own (a superuser's tasks are refused by default).
DROP TABLE audit_log;
SELECT regexp_replace(pg_temp.try($$SELECT leader_election.register_task('regress-job', 'regress_le_admin.job()', '1 hour', '1 minute') > 0$$),
                      'role "[^"]*"', 'role (superuser)') AS without_temp_table;
DROP TRIGGER regress_noop ON leader_election.tasks;

--
-- 8. An operator class an administrator adds to a built-in operator family
--    (here oid_ops, for the history's regrole column) runs its support
--    function when the index is written: added code, though its family
--    is built in.  Its comparison reads a table named without a schema.
--
CREATE TABLE regress_le_admin.cmp_rules (x int);
CREATE FUNCTION regress_le_admin.rr_cmp(a regrole, b regrole) RETURNS int
    LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    PERFORM count(*) FROM cmp_rules;
    RETURN pg_catalog.btoidcmp(a::oid, b::oid);
END $$;
CREATE FUNCTION regress_le_admin.rr_lt(regrole, regrole) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1::oid OPERATOR(pg_catalog.<) $2::oid $$;
CREATE FUNCTION regress_le_admin.rr_le(regrole, regrole) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1::oid OPERATOR(pg_catalog.<=) $2::oid $$;
CREATE FUNCTION regress_le_admin.rr_eq(regrole, regrole) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1::oid OPERATOR(pg_catalog.=) $2::oid $$;
CREATE FUNCTION regress_le_admin.rr_ge(regrole, regrole) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1::oid OPERATOR(pg_catalog.>=) $2::oid $$;
CREATE FUNCTION regress_le_admin.rr_gt(regrole, regrole) RETURNS boolean LANGUAGE sql IMMUTABLE
    AS $$ SELECT $1::oid OPERATOR(pg_catalog.>) $2::oid $$;
CREATE OPERATOR regress_le_admin.< (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = regress_le_admin.rr_lt);
CREATE OPERATOR regress_le_admin.<= (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = regress_le_admin.rr_le);
CREATE OPERATOR regress_le_admin.= (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = regress_le_admin.rr_eq);
CREATE OPERATOR regress_le_admin.>= (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = regress_le_admin.rr_ge);
CREATE OPERATOR regress_le_admin.> (LEFTARG = regrole, RIGHTARG = regrole, FUNCTION = regress_le_admin.rr_gt);
CREATE OPERATOR CLASS regress_le_admin.regrole_ops FOR TYPE regrole USING btree
    FAMILY pg_catalog.oid_ops AS
    OPERATOR 1 regress_le_admin.< (regrole, regrole),
    OPERATOR 2 regress_le_admin.<= (regrole, regrole),
    OPERATOR 3 regress_le_admin.= (regrole, regrole),
    OPERATOR 4 regress_le_admin.>= (regrole, regrole),
    OPERATOR 5 regress_le_admin.> (regrole, regrole),
    FUNCTION 1 regress_le_admin.rr_cmp(regrole, regrole);
-- (PostgreSQL 17 and later build an index with search_path pg_catalog,
-- pg_temp: the administrator's temporary table is what the build finds.)
CREATE TEMP TABLE cmp_rules (x int);
CREATE INDEX regress_owner_idx ON leader_election.history (owner regress_le_admin.regrole_ops);
DROP TABLE pg_temp.cmp_rules;
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE FUNCTION pg_temp.grab_value() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN 1;
END $$;
CREATE TEMP VIEW cmp_rules AS SELECT pg_temp.grab_value() AS x;
SELECT pg_temp.try($$SELECT try_acquire_leader('opclass', '1 minute', 't1')$$) AS opclass_stand_in;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
-- Without the stand-in the comparison finds no table: fails closed.
DISCARD TEMP;
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
SELECT pg_temp.try($$SELECT try_acquire_leader('opclass', '1 minute', 't1')$$) AS opclass_fails_closed;
\c - :regress_superuser
DROP INDEX leader_election.regress_owner_idx;

--
-- 9. A CHECK constraint of built-in functions only is added code too: some
--    run SQL text (query_to_xml), whose names the caller's search_path
--    would resolve.  The history keeps such a CHECK and its direct writes.
--
CREATE TABLE regress_le_admin.banned_holders (h text);
ALTER TABLE leader_election.history ADD CONSTRAINT regress_not_banned CHECK (
    pg_catalog.strpos(pg_catalog.query_to_xml(
        'SELECT 1 FROM banned_holders WHERE h = ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal(holder),
        false, false, '')::text, '<row>') OPERATOR(pg_catalog.=) 0) NOT VALID;
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE FUNCTION regress_le_tenant_schema.grab_text() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN 'x';
END $$;
CREATE VIEW regress_le_tenant_schema.banned_holders AS SELECT regress_le_tenant_schema.grab_text() AS h;
SET search_path = regress_le_tenant_schema, regress_le_admin, public;
SELECT pg_temp.try($$SELECT public.try_acquire_leader('xml', '1 minute', 't1')$$) AS query_text_path;
RESET search_path;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
CREATE TEMP VIEW banned_holders AS SELECT regress_le_tenant_schema.grab_text() AS h;
SELECT pg_temp.try($$SELECT try_acquire_leader('xml', '1 minute', 't1')$$) AS query_text_stand_in;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
\c - :regress_superuser
ALTER TABLE leader_election.history DROP CONSTRAINT regress_not_banned;

--
-- 10. Added code that builds SQL text by doubling quotes means what its
--     author saw whatever the caller sets standard_conforming_strings to.
--
CREATE TABLE regress_le_admin.holders_seen (h text);
CREATE FUNCTION regress_le_admin.audit_by_hand() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'INSERT INTO regress_le_admin.holders_seen VALUES ('''
        || pg_catalog.replace(NEW.holder, '''', '''''') || ''')';
    RETURN NULL;
END $$;
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_by_hand();
\c - regress_le_tenant
SET standard_conforming_strings = off;
SELECT try_acquire_leader('quotes', '1 minute',
    $h$x\'); ALTER ROLE regress_le_tenant SUPERUSER; --$h$) AS acquired;
RESET standard_conforming_strings;
\c - :regress_superuser
SELECT h FROM regress_le_admin.holders_seen;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
DROP TRIGGER regress_audit ON leader_election.leases;

--
-- 11. A CHECK with the install's name but not its shape (an administrator
--     re-created it) is added code, though it calls built-in functions
--     only: query_to_xml runs SQL text, whose names the caller's
--     search_path would resolve, on the direct path.
--
CREATE TABLE regress_le_admin.allowed_reasons (r text);
INSERT INTO regress_le_admin.allowed_reasons VALUES ('released'), ('expired'), ('session_ended'), ('moved');
ALTER TABLE leader_election.history DROP CONSTRAINT history_end_reason,
    ADD CONSTRAINT history_end_reason CHECK (end_reason IS NULL OR
        pg_catalog.strpos(pg_catalog.query_to_xml(
            'SELECT 1 FROM allowed_reasons WHERE r = ' OPERATOR(pg_catalog.||) pg_catalog.quote_literal(end_reason),
            false, false, '')::text, '<row>') OPERATOR(pg_catalog.>) 0) NOT VALID;
\c - regress_le_tenant
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE VIEW regress_le_tenant_schema.allowed_reasons AS SELECT regress_le_tenant_schema.grab_text() AS r;
SET search_path = regress_le_tenant_schema, public;
SELECT try_acquire_leader('shape', '100 ms', 't1') AS acquired;
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '5 seconds';
BEGIN
    WHILE am_leader('shape', 't1') AND clock_timestamp() < deadline LOOP
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT pg_temp.try($$SELECT try_acquire_leader('shape', '1 minute', 't2')$$) AS takeover_with_reshaped_check;
RESET search_path;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
\c - :regress_superuser
ALTER TABLE leader_election.history DROP CONSTRAINT history_end_reason,
    ADD CONSTRAINT history_end_reason
    CHECK (end_reason OPERATOR(pg_catalog.=) ANY (ARRAY['released', 'expired', 'session_ended', 'moved']::pg_catalog.text[]));

--
-- 12. The administrator's name functions write the tables as their owner
--     too: a name administrator (trusted with names, not with a
--     superuser's rights) with a temporary table standing in for one that
--     added code names is refused as well.
--
CREATE ROLE regress_le_name_admin LOGIN;
GRANT EXECUTE ON FUNCTION leader_election.release_name(text) TO regress_le_name_admin;
GRANT USAGE ON SCHEMA leader_election TO regress_le_name_admin;
SELECT try_acquire_leader('named', '1 hour', 'h1') AS held;
CREATE TRIGGER regress_audit AFTER INSERT OR UPDATE ON leader_election.history
    FOR EACH ROW EXECUTE FUNCTION regress_le_admin.audit_unqualified_table();
\c - regress_le_name_admin
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
CREATE FUNCTION pg_temp.grab() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_name_admin SUPERUSER;
    RETURN NEW;
END $$;
CREATE TRIGGER grab BEFORE INSERT ON pg_temp.audit_log
    FOR EACH ROW EXECUTE FUNCTION pg_temp.grab();
SELECT leader_election.release_name('named') AS released;
\c - :regress_superuser
SELECT holder FROM leader_election.leases WHERE name = 'named';
SELECT rolsuper AS name_admin_is_superuser FROM pg_roles WHERE rolname = 'regress_le_name_admin';
DROP TRIGGER regress_audit ON leader_election.history;
REVOKE ALL ON FUNCTION leader_election.release_name(text) FROM regress_le_name_admin;
REVOKE ALL ON SCHEMA leader_election FROM regress_le_name_admin;
DROP ROLE regress_le_name_admin;

--
-- 13. While added code is on the tables, answers read the table, not the
--     lease cache: a CHECK constraint's function may write lease rows
--     while the extension's own write runs, which the cache's trigger
--     would take for the extension's own.
--
CREATE FUNCTION regress_le_admin.side_effect(n text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF n = 'side-trigger' THEN
        UPDATE leader_election.leases SET holder = 'stolen' WHERE name = 'side-victim';
    END IF;
    RETURN true;
END $$;
ALTER TABLE leader_election.leases ADD CONSTRAINT regress_side
    CHECK (regress_le_admin.side_effect(name)) NOT VALID;
SELECT try_acquire_leader('side-victim', '1 hour', 'hv') AS acquired;
SELECT am_leader('side-victim', 'hv') AS before;
SELECT try_acquire_leader('side-trigger', '1 hour', 'x') AS acquired;
SELECT am_leader('side-victim', 'hv') AS old_holder, am_leader('side-victim', 'stolen') AS new_holder;
ALTER TABLE leader_election.leases DROP CONSTRAINT regress_side;

--
-- 14. What the README asks of functions added code calls: a SET
--     search_path of their own.  PL/pgSQL keeps what a function's first
--     call in a session resolved; with its own search_path, a call the
--     tenant makes first under the tenant's path compiles under the
--     function's path all the same, so the tenant's type named text never
--     stands in for pg_catalog.text.
--
CREATE FUNCTION regress_le_admin.holder_ok(h text) RETURNS boolean
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t text;
BEGIN
    t := h;
    RETURN t IS NULL OR length(t) < 200;
END $$;
ALTER TABLE leader_election.leases ADD CONSTRAINT regress_holder_ok
    CHECK (regress_le_admin.holder_ok(holder)) NOT VALID;
\c - regress_le_tenant
CREATE FUNCTION regress_le_tenant_schema.grab_bool(text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    ALTER ROLE regress_le_tenant SUPERUSER;
    RETURN true;
END $$;
CREATE DOMAIN regress_le_tenant_schema.text AS pg_catalog.text
    CHECK (regress_le_tenant_schema.grab_bool(VALUE));
SET search_path = regress_le_tenant_schema, pg_catalog;
SELECT regress_le_admin.holder_ok('x' COLLATE "C") AS compiled_first_by_the_tenant;
SELECT public.try_acquire_leader('compiled', '1 minute', 'h2') AS acquired;
RESET search_path;
SELECT regress_le_admin.escalated() AS tenant_is_superuser;
\c - :regress_superuser
ALTER TABLE leader_election.leases DROP CONSTRAINT regress_holder_ok;

-- Without added code again: the tenant's temporary table is no obstacle.
\c - regress_le_tenant
CREATE TEMP TABLE audit_log (name text, by_role text, search_path text);
SELECT try_acquire_leader('after', '1 minute', 't1') AS served_again;
\c - :regress_superuser

DROP SCHEMA regress_le_admin CASCADE;
DROP SCHEMA regress_le_tenant_schema CASCADE;
TRUNCATE leader_election.leases, leader_election.history;
REVOKE ALL ON SCHEMA leader_election FROM regress_le_tenant;
REVOKE ALL ON FUNCTION try_acquire_leader(text, interval, text), am_leader(text, text),
      release_leader(text, text, text), leader_term(text, text), current_leader(text)
   FROM regress_le_tenant;
DROP ROLE regress_le_tenant;
