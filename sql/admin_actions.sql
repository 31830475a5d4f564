--
-- admin_actions: what a DBA can do to the extension's tables, and what
-- still holds afterwards (issue 11; lease.c I1, I2, I5; lease_cache.c C1;
-- catalog_watch.c).
--
-- Every change below is made in another backend (a dblink connection), and
-- every answer is asked twice: here, in a backend that has used the lease
-- cache all along, and in a *fresh* backend that connects after the change.
-- With the library preloaded (as test/all.sh runs this suite) answers come
-- from the shared lease cache, so a change that bypassed it would show as a
-- stale answer in one of the two.
--
\set ECHO none
\i test/regress_helpers.sql
\set ECHO all
CREATE EXTENSION dblink;
CREATE EXTENSION amcheck;
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

CREATE FUNCTION pg_temp.connstr() RETURNS text LANGUAGE sql AS $$
    SELECT format('dbname=%s port=%s host=%s', current_database(),
                  current_setting('port'),
                  split_part(current_setting('unix_socket_directories'), ',', 1))
$$;
SELECT dblink_connect('admin', pg_temp.connstr());
-- admin(sql): run sql in the admin's session, in its own transaction.
CREATE FUNCTION pg_temp.admin(sql text) RETURNS text LANGUAGE sql AS $$
    SELECT dblink_exec('admin', sql)
$$;
-- answers(name): what this backend says for holders h1 and h2.
CREATE FUNCTION pg_temp.answers(lease text) RETURNS text LANGUAGE sql AS $$
    SELECT format('h1:%s/%s h2:%s/%s',
                  am_leader(lease, 'h1'), coalesce(leader_term(lease, 'h1')::text, '-'),
                  am_leader(lease, 'h2'), coalesce(leader_term(lease, 'h2')::text, '-'))
$$;
-- fresh_answers(name): the same, asked by a backend that connects now.
CREATE FUNCTION pg_temp.fresh_answers(lease text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    PERFORM dblink_connect('fresh', pg_temp.connstr());
    SELECT t.r INTO result FROM dblink('fresh', format(
        $q$SELECT format('h1:%%s/%%s h2:%%s/%%s',
                  am_leader(%1$L, 'h1'), coalesce(leader_term(%1$L, 'h1')::text, '-'),
                  am_leader(%1$L, 'h2'), coalesce(leader_term(%1$L, 'h2')::text, '-'))$q$,
        lease)) AS t(r text);
    PERFORM dblink_disconnect('fresh');
    RETURN result;
END $$;
-- indexes_ok(): amcheck on every index of leases, the heap checked against
-- each; true, or an error naming the broken index.
CREATE FUNCTION pg_temp.indexes_ok() RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    idx regclass;
BEGIN
    FOR idx IN SELECT indexrelid FROM pg_index
                WHERE indrelid = 'leader_election.leases'::regclass LOOP
        PERFORM bt_index_parent_check(idx, true);
    END LOOP;
    RETURN true;
END $$;

--
-- Indexes an administrator adds stay consistent (plain, partial,
-- expression), through renewals, takeovers and releases: renewals then
-- go through the executor, which maintains every index.
--
CREATE INDEX leases_expires_idx ON leader_election.leases (expires_at);
CREATE INDEX leases_held_idx ON leader_election.leases (holder) WHERE holder IS NOT NULL;
CREATE INDEX leases_expr_idx ON leader_election.leases ((expires_at - renewed_at));
SELECT try_acquire_leader('idx', '1 hour', 'h1') AS acquired;
SELECT bool_and(try_acquire_leader('idx', '1 hour', 'h1')) AS renewed_50_times
  FROM generate_series(1, 50);
SELECT release_leader('idx', 'h1') AS released,
       try_acquire_leader('idx', '1 hour', 'h2') AS taken_again;
SELECT pg_temp.indexes_ok() AS indexes_ok;
SET enable_seqscan = off;
SELECT count(*) AS found_by_expiry_index FROM leader_election.leases
 WHERE expires_at > now() AND name = 'idx';
SELECT count(*) AS found_by_partial_index FROM leader_election.leases
 WHERE holder = 'h2';
RESET enable_seqscan;
DROP INDEX leader_election.leases_expires_idx, leader_election.leases_held_idx,
           leader_election.leases_expr_idx;
-- Back to the installed shape: renewals in place again, still consistent.
SELECT bool_and(try_acquire_leader('idx', '1 hour', 'h2')) AS renewed_50_times
  FROM generate_series(1, 50);
SELECT pg_temp.indexes_ok() AS indexes_ok;

-- DDL that commits while a transaction already has the table open: the
-- renewal in that transaction sees the new index (and trigger), as the
-- executor would.
SELECT try_acquire_leader('race', '1 hour', 'h1') AS acquired;
BEGIN;
SELECT holder FROM current_leader('race');          -- the table is open now
SELECT pg_temp.admin($$CREATE INDEX leases_race_idx ON leader_election.leases (expires_at)$$);
SELECT try_acquire_leader('race', '2 hours', 'h1') AS renewed;
COMMIT;
SELECT pg_temp.indexes_ok() AS indexes_ok;
SET enable_seqscan = off;
SELECT count(*) AS found_by_new_index FROM leader_election.leases
 WHERE expires_at > now() + interval '90 minutes' AND name = 'race';
RESET enable_seqscan;
DROP INDEX leader_election.leases_race_idx;

-- A trigger an administrator adds fires on every renewal too (an audit log).
CREATE TABLE public.le_audit (name text, expires_at timestamptz);
CREATE FUNCTION public.le_audit_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.le_audit VALUES (NEW.name, NEW.expires_at);
    RETURN NEW;
END $$;
CREATE TRIGGER audit AFTER UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION public.le_audit_lease();
SELECT try_acquire_leader('idx', '1 hour', 'h2') AS renewed,
       try_acquire_leader('idx', '2 hours', 'h2') AS renewed_again;
SELECT count(*) AS audited_renewals FROM public.le_audit;
DROP TRIGGER audit ON leader_election.leases;

-- ... also when it was created after the renewing transaction opened the table.
BEGIN;
SELECT holder FROM current_leader('idx');
SELECT pg_temp.admin($$CREATE TRIGGER audit2 AFTER UPDATE ON leader_election.leases FOR EACH ROW EXECUTE FUNCTION public.le_audit_lease()$$);
SELECT try_acquire_leader('idx', '3 hours', 'h2') AS renewed;
COMMIT;
SELECT count(*) AS audited_renewals FROM public.le_audit;
DROP TRIGGER audit2 ON leader_election.leases;
DROP TABLE public.le_audit;
DROP FUNCTION public.le_audit_lease();

-- A BEFORE trigger that rewrites what the extension writes: answers follow
-- the rows as written (the lease cache steps aside while it is there).
CREATE FUNCTION pg_temp.cap_ttl() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.expires_at := least(NEW.expires_at, clock_timestamp() + interval '200 milliseconds');
    RETURN NEW;
END $$;
CREATE TRIGGER cap_ttl BEFORE INSERT OR UPDATE ON leader_election.leases
    FOR EACH ROW EXECUTE FUNCTION pg_temp.cap_ttl();
SELECT try_acquire_leader('capped', '1 hour', 'h1') AS acquired;
SELECT pg_temp.wait_until_expired('capped');
SELECT pg_temp.answers('capped') AS after_the_capped_expiry,
       try_acquire_leader('capped', '1 hour', 'h2') AS h2_takes_over;
DROP TRIGGER cap_ttl ON leader_election.leases;

-- A CHECK constraint an administrator adds is enforced on renewals.
ALTER TABLE leader_election.leases ADD CONSTRAINT at_most_a_day
    CHECK (expires_at - renewed_at <= interval '1 day');
SELECT pg_temp.try($$SELECT try_acquire_leader('idx', '2 days', 'h2')$$) AS two_days;
SELECT pg_temp.answers('idx');
ALTER TABLE leader_election.leases DROP CONSTRAINT at_most_a_day;

--
-- Terms are never reused, whatever rows were deleted.
--
SELECT try_acquire_leader('del', '1 hour', 'h1') AS h1,
       release_leader('del', 'h1') AS released,
       try_acquire_leader('del', '1 hour', 'h2') AS h2;
SELECT leader_term('del', 'h2') AS last_term \gset
SELECT pg_temp.admin($$DELETE FROM leader_election.leases WHERE name = 'del'$$);
SELECT try_acquire_leader('del', '1 hour', 'h1') AS after_delete,
       leader_term('del', 'h1') > :last_term AS term_above_every_earlier_one;
SELECT leader_term('del', 'h1') AS last_term \gset
SET leader_election.history_max_terms = 0;
SELECT pg_temp.admin($$DELETE FROM leader_election.leases WHERE name = 'del'$$);
SELECT pg_temp.admin($$DELETE FROM leader_election.history WHERE name = 'del'$$);
SELECT try_acquire_leader('del', '1 hour', 'h2') AS after_deleting_row_and_history,
       leader_term('del', 'h2') > :last_term AS term_above_every_earlier_one;
RESET leader_election.history_max_terms;
SELECT leader_term('del', 'h2') AS last_term \gset
SELECT pg_temp.admin($$TRUNCATE leader_election.leases, leader_election.history$$);
SELECT try_acquire_leader('del', '1 hour', 'h1') AS after_truncate,
       leader_term('del', 'h1') > :last_term AS term_above_every_earlier_one;
SELECT count(*) AS history_rows FROM leader_election.history WHERE name = 'del';

--
-- Rows that arrive without the term counter (logical replication of the
-- tables, a restore of some tables only): the next term of such a name is
-- still above its row's and its history's, and the counter follows.
--
SELECT pg_temp.admin($$INSERT INTO leader_election.leases (name, owner, holder, term, expires_at)
                       VALUES ('arrived', current_user::regrole, 'elsewhere', 1000000, now() - interval '1 second')$$);
SELECT pg_temp.admin($$INSERT INTO leader_election.history (name, term, holder, owner, session_bound, acquired_at)
                       VALUES ('hist-only', 2000000, 'elsewhere', current_user::regrole, false, now())$$);
SELECT try_acquire_leader('arrived', '1 hour', 'h1') AS takes_over,
       leader_term('arrived', 'h1') > 1000000 AS above_the_rows_term;
SELECT try_acquire_leader('hist-only', '1 hour', 'h1') AS new_row,
       leader_term('hist-only', 'h1') > 2000000 AS above_its_history;
SELECT try_acquire_leader('after-them', '1 hour', 'h1') AS new_name,
       leader_term('after-them', 'h1') > 2000000 AS counter_moved_up;
-- History that arrives for a name that has a row: the next takeover is
-- above it too.
SELECT pg_temp.admin($$INSERT INTO leader_election.history (name, term, holder, owner, session_bound, acquired_at)
                       VALUES ('arrived', 5000000, 'elsewhere', current_user::regrole, false, now())$$);
SELECT release_leader('arrived', 'h1') AS released,
       try_acquire_leader('arrived', '1 hour', 'h2') AS h2_takes_over,
       leader_term('arrived', 'h2') > 5000000 AS above_its_history;

--
-- A row deleted by hand: terms still come from the counter, and names are
-- counted by what is committed.
--
SELECT leader_term('arrived', 'h2') AS last_term \gset
SELECT pg_temp.admin($$DELETE FROM leader_election.leases WHERE name = 'arrived'$$);
SELECT try_acquire_leader('arrived', '1 hour', 'h1') AS after_delete,
       leader_term('arrived', 'h1') > :last_term AS term_above_every_earlier_one;
SET leader_election.max_names_per_role = 1000;
SELECT try_acquire_leader('counted-by-scan', '1 hour', 'h1') AS new_name_counted;
RESET leader_election.max_names_per_role;

--
-- A NOT NULL an administrator adds is enforced on renewals too: the renewal
-- that would break it fails (23502) and changes nothing.
--
SET application_name = 'app1';
SELECT try_acquire_leader('nn', '1 hour', 'h1') AS acquired;
ALTER TABLE leader_election.leases ALTER COLUMN application_name SET NOT NULL;
SET application_name = '';
SELECT pg_temp.try($$SELECT try_acquire_leader('nn', '1 hour', 'h1')$$) AS renewal_without_app_name;
SELECT application_name FROM leader_election.leases WHERE name = 'nn';
ALTER TABLE leader_election.leases ALTER COLUMN application_name DROP NOT NULL;

--
-- A column added to the table (even dropped again) is not supported: every
-- call fails with 55000, not an internal error (rolled back here).
--
BEGIN;
ALTER TABLE leader_election.leases ADD COLUMN extra integer;
ALTER TABLE leader_election.leases DROP COLUMN extra;
SELECT pg_temp.try($$SELECT try_acquire_leader('cols', '1 hour', 'h1')$$) AS with_a_dropped_column;
ROLLBACK;
SELECT try_acquire_leader('cols', '1 hour', 'h1') AS after_the_rollback;
RESET application_name;

--
-- A rule that rewrites what the extension writes: answers follow the rows
-- (the lease cache steps aside while a rule is on the table).
--
CREATE RULE cap_ins AS ON INSERT TO leader_election.leases DO ALSO
    UPDATE leader_election.leases SET expires_at = clock_timestamp() + interval '200 milliseconds'
     WHERE name = NEW.name;
SELECT try_acquire_leader('ruled', '1 hour', 'h1') AS acquired;
SELECT pg_temp.wait_until_expired('ruled');
SELECT pg_temp.answers('ruled') AS after_the_rules_expiry,
       try_acquire_leader('ruled', '1 hour', 'h2') AS h2_takes_over;
DROP RULE cap_ins ON leader_election.leases;
-- A waiter prepares its takeover before it sleeps: under a rule, the
-- statements a takeover then runs (no UPDATE in WITH, which a DO ALSO rule
-- forbids), so it waits instead of failing.
CREATE TABLE public.lease_audit (name text);
CREATE RULE audit_upd AS ON UPDATE TO leader_election.leases DO ALSO
    INSERT INTO public.lease_audit VALUES (NEW.name);
SELECT wait_for_leadership('ruled', '1 hour', '0', 'h3') AS h3_waits_in_vain;
DROP RULE audit_upd ON leader_election.leases;
DROP TABLE public.lease_audit;

--
-- Changes that bypass the cache's triggers: every backend, and every
-- backend that connects later, sees them.  The fresh backend asks first,
-- before any backend that was connected during the change has processed
-- its invalidations.
--
SELECT try_acquire_leader('w', '1 hour', 'h1') AS h1_leads;
SELECT pg_temp.answers('w');                 -- fills the cache: h1
-- Triggers disabled for the change, enabled again afterwards.
SELECT pg_temp.admin($$BEGIN$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases DISABLE TRIGGER ALL$$);
SELECT pg_temp.admin($$UPDATE leader_election.leases SET holder = 'h2', term = term + 1000 WHERE name = 'w'$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_truncate$$);
SELECT pg_temp.admin($$COMMIT$$);
SELECT pg_temp.fresh_answers('w');           -- h2
SELECT pg_temp.answers('w');                 -- h2
SELECT pg_temp.try($$SELECT assert_leader('w', NULL, 'h2') > 0$$) AS h2_fences;
-- The same in separate transactions, as pg_restore --disable-triggers does.
SELECT pg_temp.answers('w');
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases DISABLE TRIGGER ALL$$);
SELECT pg_temp.answers('w');                 -- triggers off: the table answers
SELECT pg_temp.admin($$UPDATE leader_election.leases SET holder = 'h1', term = term + 1000 WHERE name = 'w'$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_truncate$$);
SELECT pg_temp.fresh_answers('w');           -- h1
SELECT pg_temp.answers('w');                 -- h1
-- Plain ENABLE (what pg_restore leaves): they do not fire under
-- session_replication_role = replica, so the cache is not used.
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE TRIGGER ALL$$);
SELECT pg_temp.admin($$SET session_replication_role = replica$$);
SELECT pg_temp.admin($$UPDATE leader_election.leases SET holder = 'h2', term = term + 1000 WHERE name = 'w'$$);
SELECT pg_temp.admin($$RESET session_replication_role$$);
SELECT pg_temp.answers('w');                 -- h2
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_rows$$);
SELECT pg_temp.admin($$ALTER TABLE leader_election.leases ENABLE ALWAYS TRIGGER leases_cache_invalidate_truncate$$);
SELECT pg_temp.fresh_answers('w');           -- h2
-- The trigger function replaced by one that does nothing, a change made,
-- the original put back.
SELECT pg_temp.answers('w');
SELECT pg_temp.admin($$ALTER EXTENSION leader_election DROP FUNCTION leader_election.leases_cache_invalidate()$$);
SELECT pg_temp.admin($$CREATE OR REPLACE FUNCTION leader_election.leases_cache_invalidate() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'$$);
SELECT pg_temp.answers('w');                 -- the function is not ours: the table answers
SELECT pg_temp.admin($$UPDATE leader_election.leases SET holder = 'h1', term = term + 1000 WHERE name = 'w'$$);
SELECT pg_temp.admin($$CREATE OR REPLACE FUNCTION leader_election.leases_cache_invalidate() RETURNS trigger LANGUAGE C AS '$libdir/leader_election', 'le_leases_cache_invalidate'$$);
SELECT pg_temp.admin($$ALTER EXTENSION leader_election ADD FUNCTION leader_election.leases_cache_invalidate()$$);
SELECT pg_temp.fresh_answers('w');           -- h1
SELECT pg_temp.answers('w');                 -- h1
-- TRUNCATE: nobody holds anything.
SELECT pg_temp.admin($$TRUNCATE leader_election.leases$$);
SELECT pg_temp.answers('w'), pg_temp.fresh_answers('w');

--
-- Maintenance that rewrites the table keeps every answer and the indexes.
--
SELECT try_acquire_leader('m', '1 hour', 'h1') AS h1_leads, pg_temp.answers('m');
SELECT pg_temp.admin($$VACUUM FULL leader_election.leases$$);
SELECT pg_temp.answers('m'), pg_temp.fresh_answers('m');
SELECT pg_temp.admin($$CLUSTER leader_election.leases USING leases_pkey$$);
SELECT try_acquire_leader('m', '1 hour', 'h1') AS renewed, pg_temp.answers('m');
SELECT pg_temp.admin($$REINDEX TABLE leader_election.leases$$);
SELECT try_acquire_leader('m', '1 hour', 'h2') AS h2_refused, pg_temp.fresh_answers('m');
SELECT pg_temp.indexes_ok() AS indexes_ok;

--
-- The end of the term counter: a clear error, and nothing changes.
--
SELECT pg_temp.admin($$ALTER SEQUENCE leader_election.terms RESTART WITH 9223372036854775807$$);
SELECT try_acquire_leader('last', '1 hour', 'h1') AS gets_the_last_term,
       leader_term('last', 'h1') AS term;
SELECT pg_temp.try($$SELECT try_acquire_leader('one-more', '1 hour', 'h1')$$) AS past_the_end;
SELECT count(*) AS rows FROM leader_election.leases WHERE name = 'one-more';

--
-- DROP EXTENSION deletes every lease; a new CREATE EXTENSION starts over,
-- and no backend remembers a lease of the dropped one.
--
SELECT pg_temp.answers('m');
DROP EXTENSION leader_election CASCADE;
CREATE EXTENSION leader_election;
SELECT pg_temp.answers('m'), pg_temp.fresh_answers('m');

--
-- A database dropped and created again with the same OID from the same
-- template (so the same relation OIDs): no backend answers from the old
-- database's leases.
--
CREATE DATABASE le_tpl;
SELECT dblink_connect('tpl', replace(pg_temp.connstr(), current_database(), 'le_tpl'));
SELECT dblink_exec('tpl', 'CREATE EXTENSION leader_election');
SELECT * FROM dblink('tpl', $$SELECT try_acquire_leader('job', '1 hour', 'h9')$$) AS t(h9_leads_in_template boolean);
SELECT dblink_disconnect('tpl');
CREATE DATABASE le_d1 TEMPLATE le_tpl;
SELECT oid AS d1_oid FROM pg_database WHERE datname = 'le_d1' \gset
CREATE FUNCTION pg_temp.in_d1(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    result text;
BEGIN
    PERFORM dblink_connect('d1', replace(pg_temp.connstr(), current_database(), 'le_d1'));
    SELECT t.r INTO result FROM dblink('d1', sql) AS t(r text);
    PERFORM dblink_disconnect('d1');
    RETURN result;
END $$;
SELECT pg_temp.in_d1($$SELECT format('%s %s', release_leader('job', 'h9'), try_acquire_leader('job', '1 hour', 'h1'))$$) AS h1_takes_job;
SELECT pg_temp.in_d1($$SELECT format('%s/%s', am_leader('job', 'h1'), leader_term('job', 'h1'))$$) AS h1_in_d1;
DROP DATABASE le_d1;
CREATE DATABASE le_d1 OID = :d1_oid TEMPLATE le_tpl;
SELECT pg_temp.in_d1($$SELECT format('h1:%s/%s h9:%s/%s', am_leader('job', 'h1'), coalesce(leader_term('job', 'h1')::text, '-'), am_leader('job', 'h9'), coalesce(leader_term('job', 'h9')::text, '-'))$$) AS recreated_d1;
SELECT pg_temp.in_d1($$SELECT try_acquire_leader('job', '1 hour', 'h9')::text$$) AS h9_renews;
DROP DATABASE le_d1;
DROP DATABASE le_tpl;
--
-- A first grant writes its lease and history rows without the executor
-- while both tables are as installed (direct_write.c).  What an
-- administrator adds to history applies to those rows as to any INSERT.
--
-- A CHECK constraint (NOT VALID: enforced on new rows only): the grant
-- fails with 23514 and writes nothing.
ALTER TABLE leader_election.history ADD CONSTRAINT short_holders
    CHECK (length(holder) <= 5) NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('hc', '1 hour', 'a_long_holder')$$) AS long_holder;
SELECT count(*) AS lease_rows FROM leader_election.leases WHERE name = 'hc';
SELECT try_acquire_leader('hc', '1 hour', 'h1') AS short_holder;
SELECT holder AS history_holder FROM leader_election.history WHERE name = 'hc';
ALTER TABLE leader_election.history DROP CONSTRAINT short_holders;
-- A trigger fires, also one created after the granting transaction opened
-- the table (CREATE TRIGGER does not wait for readers).
CREATE TABLE public.le_history_audit (name text, term bigint);
CREATE FUNCTION public.le_audit_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.le_history_audit VALUES (NEW.name, NEW.term);
    RETURN NEW;
END $$;
BEGIN;
SELECT count(*) >= 0 AS history_opened FROM leader_election.history;
SELECT pg_temp.admin($$CREATE TRIGGER audit AFTER INSERT ON leader_election.history FOR EACH ROW EXECUTE FUNCTION public.le_audit_history()$$);
SELECT try_acquire_leader('ht', '1 hour', 'h1') AS granted;
COMMIT;
SELECT a.term = h.term AS audited_the_term
FROM public.le_history_audit AS a JOIN leader_election.history AS h USING (name)
WHERE name = 'ht';
DROP TRIGGER audit ON leader_election.history;
DROP TABLE public.le_history_audit;
DROP FUNCTION public.le_audit_history();
-- An index gets the new rows' entries, also one created after the granting
-- transaction opened the table (amcheck: every heap row is in the index).
BEGIN;
SELECT count(*) >= 0 AS history_opened FROM leader_election.history;
SELECT pg_temp.admin($$CREATE INDEX history_holder_idx ON leader_election.history (holder)$$);
SELECT try_acquire_leader('hi', '1 hour', 'h1') AS granted;
COMMIT;
SELECT bt_index_check('leader_election.history_holder_idx', true);
DROP INDEX leader_election.history_holder_idx;
-- A CHECK whose function changes the table's catalog entry while it runs
-- (a GRANT: every backend drops what it kept of the table), next to a
-- second CHECK: both are still evaluated.
CREATE FUNCTION public.le_regrant(h text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'GRANT SELECT ON leader_election.history TO PUBLIC';
    RETURN h <> 'bad';
END $$;
ALTER TABLE leader_election.history ADD CONSTRAINT a_regrant
    CHECK (public.le_regrant(holder)) NOT VALID;
ALTER TABLE leader_election.history ADD CONSTRAINT b_no_evil
    CHECK (holder <> 'evil') NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('hg1', '1 hour', 'bad')$$) AS bad_holder,
       pg_temp.try($$SELECT try_acquire_leader('hg2', '1 hour', 'evil')$$) AS evil_holder,
       pg_temp.try($$SELECT try_acquire_leader('hg3', '1 hour', 'good')$$) AS good_holder;
SELECT name, holder FROM leader_election.history WHERE name LIKE 'hg%' ORDER BY name;
ALTER TABLE leader_election.history DROP CONSTRAINT a_regrant, DROP CONSTRAINT b_no_evil;
DROP FUNCTION public.le_regrant(text);
-- A CHECK calling a SQL function that is then replaced: the new body applies.
CREATE FUNCTION public.le_holder_ok(h text) RETURNS boolean LANGUAGE sql
    AS $$ SELECT h <> 'x1' $$;
ALTER TABLE leader_election.history ADD CONSTRAINT holder_ok
    CHECK (public.le_holder_ok(holder)) NOT VALID;
SELECT try_acquire_leader('hf1', '1 hour', 'y2') AS before_the_replacement;
CREATE OR REPLACE FUNCTION public.le_holder_ok(h text) RETURNS boolean LANGUAGE sql
    AS $$ SELECT h <> 'y2' $$;
SELECT pg_temp.try($$SELECT try_acquire_leader('hf2', '1 hour', 'y2')$$) AS after_the_replacement;
ALTER TABLE leader_election.history DROP CONSTRAINT holder_ok;
DROP FUNCTION public.le_holder_ok(text);
-- A CHECK through a domain that gains a constraint later: it applies.
CREATE DOMAIN public.le_hdom AS text;
ALTER TABLE leader_election.history ADD CONSTRAINT c_dom
    CHECK ((holder::public.le_hdom) IS NOT NULL) NOT VALID;
SELECT try_acquire_leader('dd1', '1 hour', 'abc') AS before_the_domain_check;
ALTER DOMAIN public.le_hdom ADD CONSTRAINT no_zz CHECK (VALUE <> 'zz');
SELECT pg_temp.try($$SELECT try_acquire_leader('dd2', '1 hour', 'zz')$$) AS after_the_domain_check;
ALTER TABLE leader_election.history DROP CONSTRAINT c_dom;
DROP DOMAIN public.le_hdom;
-- A column default fills what the grant leaves out (rolled back here).
BEGIN;
ALTER TABLE leader_election.history ALTER COLUMN ended_at SET DEFAULT '2000-01-01 00:00+00';
SELECT try_acquire_leader('hd', '1 hour', 'h1') AS granted;
SELECT ended_at FROM leader_election.history WHERE name = 'hd';
ROLLBACK;
-- A column whose type was changed: the row is still written with the
-- table's types (rolled back here).
BEGIN;
ALTER TABLE leader_election.history ALTER COLUMN holder_pid TYPE numeric;
SELECT try_acquire_leader('hp', '1 hour', 'h1') AS granted;
SELECT holder_pid = pg_backend_pid() AS right_pid
FROM leader_election.history WHERE name = 'hp';
ROLLBACK;

--
-- A takeover under READ COMMITTED also writes its rows without the
-- executor (the lease row, the old term's end, the new term's row): what
-- an administrator adds to the history applies to it too.
--
-- A CHECK on how a term ends: the takeover that would end it so fails
-- with 23514, and nothing changes.
SELECT try_acquire_leader('te', '100 ms', 'h1') AS h1_first;
SELECT pg_temp.wait_until_expired('te');
ALTER TABLE leader_election.history ADD CONSTRAINT no_expiry
    CHECK (end_reason IS DISTINCT FROM 'expired') NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('te', '1 hour', 'h2')$$) AS takeover_ending_by_expiry;
SELECT l.holder, l.term = h.term AS same_term, h.ended_at IS NULL AS still_open
FROM leader_election.leases AS l JOIN leader_election.history AS h USING (name)
WHERE name = 'te';
ALTER TABLE leader_election.history DROP CONSTRAINT no_expiry;
-- A CHECK on the new term's row.
ALTER TABLE leader_election.history ADD CONSTRAINT no_evil_takeover
    CHECK (holder <> 'evil') NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('te', '1 hour', 'evil')$$) AS evil_takeover;
SELECT holder FROM leader_election.leases WHERE name = 'te';
ALTER TABLE leader_election.history DROP CONSTRAINT no_evil_takeover;
SELECT try_acquire_leader('te', '1 hour', 'h2') AS h2_takes_over;
SELECT row_number() OVER (ORDER BY term) AS nth_term, holder, end_reason
FROM leader_election.history WHERE name = 'te' ORDER BY term;
-- A CHECK replaced by another of the same name: the new one applies (a
-- CHECK's plan is kept across calls by its text, never by its name).
ALTER TABLE leader_election.history ADD CONSTRAINT not_this
    CHECK (holder <> 'k1') NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('kc1', '1 hour', 'k1')$$) AS k1_refused;
ALTER TABLE leader_election.history DROP CONSTRAINT not_this,
    ADD CONSTRAINT not_this CHECK (holder <> 'k2') NOT VALID;
SELECT pg_temp.try($$SELECT try_acquire_leader('kc1', '1 hour', 'k1')$$) AS k1_now_granted,
       pg_temp.try($$SELECT try_acquire_leader('kc2', '1 hour', 'k2')$$) AS k2_refused;
ALTER TABLE leader_election.history DROP CONSTRAINT not_this;
-- A CHECK is evaluated as planned now, not as an earlier call planned it:
-- a result that depends on a setting (extra_float_digits changes float8's
-- text), and a built-in SQL function replaced (here inside a transaction
-- that is rolled back).
ALTER TABLE leader_election.history ADD CONSTRAINT float_text
    CHECK ((0.1::float8 * 3)::text = '0.30000000000000004') NOT VALID;
SELECT try_acquire_leader('ft1', '1 hour', 'h1') AS under_default_digits;
SET extra_float_digits = 0;
SELECT pg_temp.try($$SELECT try_acquire_leader('ft2', '1 hour', 'h1')$$) AS under_zero_digits;
RESET extra_float_digits;
ALTER TABLE leader_election.history DROP CONSTRAINT float_text;
ALTER TABLE leader_election.history ADD CONSTRAINT holder_bits
    CHECK (bit_length(holder) < 1000) NOT VALID;
SELECT try_acquire_leader('bl1', '1 hour', 'h1') AS before_the_replacement;
BEGIN;
CREATE OR REPLACE FUNCTION pg_catalog.bit_length(text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT RETURN 123456;
SELECT pg_temp.try($$SELECT try_acquire_leader('bl2', '1 hour', 'h1')$$) AS after_the_replacement;
ROLLBACK;
ALTER TABLE leader_election.history DROP CONSTRAINT holder_bits;
-- ... and GREATEST, which planning folds with its type's comparison
-- function (not a function call in the expression): replacing that
-- function applies to the next takeover.
CREATE TYPE public.le_pick AS (k int, ok boolean);
CREATE FUNCTION public.le_pick_cmp(public.le_pick, public.le_pick) RETURNS int
    IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp(($2).k, ($1).k)';
CREATE OPERATOR CLASS public.le_pick_ops DEFAULT FOR TYPE public.le_pick USING btree
    AS FUNCTION 1 public.le_pick_cmp(public.le_pick, public.le_pick);
ALTER TABLE leader_election.history ADD CONSTRAINT pick_ok
    CHECK (ended_at IS NULL OR (GREATEST('(1,t)'::public.le_pick, '(2,f)'::public.le_pick)).ok) NOT VALID;
SELECT count(try_acquire_leader(n, '100 ms', 'h1')) AS granted FROM (VALUES ('gr1'), ('gr2')) AS v(n);
SELECT pg_temp.wait_until_expired('gr2');
SELECT try_acquire_leader('gr1', '1 hour', 'h2') AS before_the_replacement;
CREATE OR REPLACE FUNCTION public.le_pick_cmp(public.le_pick, public.le_pick) RETURNS int
    IMMUTABLE LANGUAGE sql AS 'SELECT btint4cmp(($1).k, ($2).k)';
SELECT pg_temp.try($$SELECT try_acquire_leader('gr2', '1 hour', 'h2')$$) AS after_the_replacement;
ALTER TABLE leader_election.history DROP CONSTRAINT pick_ok;
SET client_min_messages = warning;
DROP TYPE public.le_pick CASCADE;
RESET client_min_messages;
-- The statement that calls the extension has itself changed the old
-- term's history row: the takeover ends the version it sees after that
-- change, as SQL would.
SELECT try_acquire_leader('sm', '100 ms', 'h1') AS h1_first;
SELECT pg_temp.wait_until_expired('sm');
WITH touched AS (UPDATE leader_election.history SET holder_pid = holder_pid
                 WHERE name = 'sm' AND ended_at IS NULL RETURNING 1)
SELECT try_acquire_leader('sm', '1 hour', 'h2') AS taken_over FROM touched;
SELECT holder, end_reason FROM leader_election.history WHERE name = 'sm' ORDER BY term;
-- A publication of updates needs a replica identity: a takeover that would
-- end the old term's history row, and a renewal, are refused (55000) as
-- UPDATE is, and change nothing.
SELECT try_acquire_leader('ri', '100 ms', 'h1') AS h1_first;
SELECT pg_temp.wait_until_expired('ri');
ALTER TABLE leader_election.history REPLICA IDENTITY NOTHING;
ALTER TABLE leader_election.leases REPLICA IDENTITY NOTHING;
SET client_min_messages = error;
CREATE PUBLICATION le_tables_pub FOR TABLE leader_election.history, leader_election.leases;
RESET client_min_messages;
SELECT pg_temp.try($$SELECT try_acquire_leader('ri', '1 hour', 'h2')$$) AS takeover_under_publication;
SELECT pg_temp.try($$SELECT try_acquire_leader('ft1', '1 hour', 'h1')$$) AS renewal_under_publication;
SELECT holder, expires_at < now() AS still_expired FROM leader_election.leases WHERE name = 'ri';
DROP PUBLICATION le_tables_pub;
ALTER TABLE leader_election.history REPLICA IDENTITY DEFAULT;
ALTER TABLE leader_election.leases REPLICA IDENTITY DEFAULT;
-- Row versions that do not fit on their page (not HOT updates) get their
-- index entries: 300 names' history rows fill their pages, then every
-- term ends by a takeover; amcheck finds every heap row in the indexes.
SELECT count(try_acquire_leader('np' || i, '100 ms', 'h1')) AS granted
FROM generate_series(1, 300) AS i;
SELECT pg_temp.wait_until_expired('np300');
BEGIN;
SELECT count(*) FILTER (WHERE try_acquire_leader('np' || i, '1 hour', 'h2')) AS taken_over
FROM generate_series(1, 300) AS i;
SELECT n_tup_upd >= 300 AS history_ended, n_tup_upd > n_tup_hot_upd AS some_not_hot
FROM pg_stat_xact_user_tables WHERE relid = 'leader_election.history'::regclass;
COMMIT;
SELECT bt_index_parent_check('leader_election.history_pkey', true) AS history_pkey_checked,
       bt_index_parent_check('leader_election.leases_pkey', true) AS leases_pkey_checked;
SET enable_seqscan = off;
SELECT count(*) AS ended_by_expiry_found_by_index FROM leader_election.history
WHERE name >= 'np' AND name < 'nq' AND end_reason = 'expired';
RESET enable_seqscan;

SELECT dblink_disconnect('admin');
DROP EXTENSION dblink;
DROP EXTENSION amcheck;
