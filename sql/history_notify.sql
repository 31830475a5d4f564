--
-- history_notify: leader_election.history rows and the NOTIFY payloads on
-- channel "leader_election" (DESIGN.md section 3).
--
-- Every term gets a history row; how it ended is recorded as released,
-- expired or session_ended.  Every change of leader sends, at commit, a JSON
-- payload {"name","event","holder","term","reason"}; "reason" on an
-- "elected" event says how the previous term ended ("none" for a new name).
--
-- psql prints each notification with the sender's pid, so this file sends
-- those lines through sed to hide the pid (and the pid and start time in a
-- session identity).
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

--
-- NOTIFY payloads.
--
LISTEN leader_election;
-- With the library preloaded, a notifier worker sends notifications just
-- after the commit (leader_election.notify_delivery = background), so psql
-- could print them after a later query; this file asks for them in the
-- changing transaction so that each prints after its own query.  Delivery
-- by the notifier is tested by test/t/014_notify_storm.pl.
SET leader_election.notify_delivery = in_transaction;
-- Everything up to the next \o goes through sed: results and
-- notifications print together when the pipe closes, each labelled by the
-- \qecho before it.
\o | sed -e 's/server process with PID [0-9]*/server process with PID (pid)/' -e 's/session:[0-9]*:[0-9]*@[0-9]*\.[0-9]*/session:(pid):(start)@(server)/g'
\qecho -- elected, brand-new name
SELECT try_acquire_leader('n', '100ms', 'host-a') AS acquired;
\qecho -- renewal: no notification
SELECT try_acquire_leader('n', '100ms', 'host-a') AS renewed;
\qecho -- "no": no notification
SELECT try_acquire_leader('n', '1 minute', 'host-b') AS refused;
\qecho -- expiry, then takeover: elected with reason expired
SELECT pg_temp.wait_until_expired('n');
SELECT try_acquire_leader('n', '1 minute', 'host-b') AS taken_over;
\qecho -- released
SELECT release_leader('n', 'host-b') AS released;
\qecho -- elected after a release
SELECT try_acquire_leader('n', '1 minute', 'host-a') AS reacquired;
\qecho -- session identity lost (pg_advisory_unlock_all drops the liveness lock),
\qecho -- then a takeover: elected with reason session_ended
SELECT try_acquire_leader('n2', '1 minute') AS session_acquired;
SELECT pg_advisory_unlock_all();
SELECT try_acquire_leader('n2', '1 minute', 'host-b') AS taken_over;
\qecho -- a rolled-back acquisition or release sends nothing
BEGIN;
SELECT try_acquire_leader('n3', '1 minute', 'host-a') AS acquired;
SELECT release_leader('n', 'host-a') AS released;
ROLLBACK;
\qecho -- a committed transaction sends its notifications at commit, in order
BEGIN;
SELECT release_leader('n', 'host-a') AS released;
SELECT try_acquire_leader('n', '1 minute', 'host-b') AS acquired;
SELECT try_acquire_leader(E'quote"and\\backslash', '1 minute', 'host "c"') AS acquired;
COMMIT;
\o
UNLISTEN leader_election;

--
-- History: one row per term, with how it ended.
--
SELECT name, term, regexp_replace(holder, '^session:[0-9]+:[0-9]+@[0-9]+\.[0-9]+$', 'session:(pid):(start)@(server)') AS holder,
       session_bound, owner = current_user::regrole AS my_name,
       acquired_at IS NOT NULL AS has_start, ended_at IS NOT NULL AS has_end, end_reason
  FROM leader_election.history ORDER BY name, term;
-- ended_at: the release time for released, expires_at for expired
SELECT h.term, h.end_reason, h.ended_at >= h.acquired_at AS ended_after_start,
       h.ended_at <= next.acquired_at AS ended_before_next
  FROM leader_election.history h
  JOIN LATERAL (SELECT n.acquired_at FROM leader_election.history n
                 WHERE n.name = h.name AND n.term > h.term
                 ORDER BY n.term LIMIT 1) AS next ON true
 WHERE h.name = 'n' ORDER BY h.term;

--
-- A session-bound lease ends the moment its backend exits: reconnect, and
-- the lease is free without waiting for its ttl.
--
SELECT try_acquire_leader('exit', '1 minute') AS session_acquired;
\c -
-- The old backend exits asynchronously: wait (bounded) until it has.
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '10 seconds';
BEGIN
    WHILE EXISTS (SELECT FROM current_leader('exit')) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'session-bound lease still valid 10 s after its session ended';
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
END $$;
SELECT expires_at > clock_timestamp() AS ttl_not_yet_over, valid
  FROM leader_election.leaders WHERE name = 'exit';
SELECT try_acquire_leader('exit', '1 minute', 'host-b') AS taken_over,
       leader_term('exit', 'host-b') AS term;
SELECT term, session_bound, end_reason FROM leader_election.history
 WHERE name = 'exit' ORDER BY term;

--
-- leader_election.history_max_terms bounds the rows kept per name.
--
SET leader_election.history_max_terms = 2;
SELECT try_acquire_leader('trim', '1 minute', 'h' || i) AND release_leader('trim', 'h' || i) AS ok
  FROM generate_series(1, 5) AS i;
SELECT term, holder, end_reason FROM leader_election.history WHERE name = 'trim' ORDER BY term;
-- Other names keep their own rows.
SELECT count(*) AS rows_for_n FROM leader_election.history WHERE name = 'n';
-- 0 keeps no new history; the lease itself works as before.
SET leader_election.history_max_terms = 0;
SELECT try_acquire_leader('trim', '1 minute', 'h6') AS acquired, leader_term('trim', 'h6') AS term;
SELECT try_acquire_leader('no-history', '1 minute', 'h') AS acquired;
SELECT term, holder FROM leader_election.history
 WHERE name IN ('trim', 'no-history') ORDER BY name, term;
RESET leader_election.history_max_terms;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
