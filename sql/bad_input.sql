--
-- bad_input: every row of research/anchors-reliability.md section B.5
-- (DESIGN.md section 4).
--
-- Each bad input must fail with its documented SQLSTATE and change nothing:
-- after all of them there is no lease row, no history row, no advisory lock
-- and no consumed term.  The accepted edge cases (255 bytes, ttl of exactly
-- 100 ms, 1 day or 7 days, '1.5 s', case and Unicode normalisation) follow.
--
-- Rows of B.5 tested elsewhere: READ ONLY and hot standby (read_only and
-- the TAP tests), rollback and PREPARE TRANSACTION (transactions),
-- REPEATABLE READ / SERIALIZABLE (isolation_levels and the isolation
-- specs), another role's name and the per-role quota (privileges), a
-- nondeterministic ICU collation on the argument (collation_icu).
--

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
RESET leader_election.holder_id;

\set ECHO none
\i test/regress_helpers.sql
\set ECHO all

-- The bad inputs, one per row: what is wrong, and the statement.
CREATE TEMP TABLE bad_cases (id serial, input text, sql text);
INSERT INTO bad_cases (input, sql) VALUES
    -- NULLs (22004): name and ttl are required in every function
    ('name NULL',                     $$SELECT try_acquire_leader(NULL, '1 minute', 'h')$$),
    ('ttl NULL',                      $$SELECT try_acquire_leader('bad', NULL, 'h')$$),
    ('am_leader name NULL',           $$SELECT am_leader(NULL, 'h')$$),
    ('release_leader name NULL',      $$SELECT release_leader(NULL, 'h')$$),
    ('leader_term name NULL',         $$SELECT leader_term(NULL, 'h')$$),
    ('assert_leader name NULL',       $$SELECT assert_leader(NULL, 1, 'h')$$),
    ('current_leader name NULL',      $$SELECT count(*) FROM current_leader(NULL)$$),
    ('wait_for_leadership name NULL', $$SELECT wait_for_leadership(NULL, '1 minute', '0', 'h')$$),
    ('wait_for_leadership ttl NULL',  $$SELECT wait_for_leadership('bad', NULL, '0', 'h')$$),
    -- names (22023)
    ('name empty',                    $$SELECT try_acquire_leader('', '1 minute', 'h')$$),
    ('am_leader name empty',          $$SELECT am_leader('', 'h')$$),
    ('release_leader name empty',     $$SELECT release_leader('', 'h')$$),
    ('leader_term name empty',        $$SELECT leader_term('', 'h')$$),
    ('assert_leader name empty',      $$SELECT assert_leader('', NULL, 'h')$$),
    ('current_leader name empty',     $$SELECT count(*) FROM current_leader('')$$),
    ('wait_for_leadership name empty', $$SELECT wait_for_leadership('', '1 minute', '0', 'h')$$),
    ('name with \n',                  $$SELECT try_acquire_leader(E'a\nb', '1 minute', 'h')$$),
    ('name with \t',                  $$SELECT try_acquire_leader(E'a\tb', '1 minute', 'h')$$),
    ('name with \x01',                $$SELECT try_acquire_leader(E'a\x01b', '1 minute', 'h')$$),
    ('name with \x1f',                $$SELECT try_acquire_leader(E'a\x1fb', '1 minute', 'h')$$),
    ('name with \x7f (DEL)',          $$SELECT try_acquire_leader(E'a\x7fb', '1 minute', 'h')$$),
    ('name with U+0085 (NEL)',        $$SELECT try_acquire_leader(U&'a\0085b', '1 minute', 'h')$$),
    ('name with U+009F',              $$SELECT try_acquire_leader(U&'a\009Fb', '1 minute', 'h')$$),
    ('am_leader name with \n',        $$SELECT am_leader(E'a\nb', 'h')$$),
    ('name 256 bytes ASCII',          $$SELECT try_acquire_leader(repeat('x', 256), '1 minute', 'h')$$),
    ('name 256 bytes, 2-byte char last', $$SELECT try_acquire_leader(repeat('x', 254) || U&'\00E9', '1 minute', 'h')$$),
    ('name 256 bytes, 4-byte char last', $$SELECT try_acquire_leader(repeat('x', 252) || U&'\+01F600', '1 minute', 'h')$$),
    ('name 255 chars but 510 bytes',  $$SELECT try_acquire_leader(repeat(U&'\00E9', 255), '1 minute', 'h')$$),
    ('name 1 MB',                     $$SELECT try_acquire_leader(repeat('x', 1048576), '1 minute', 'h')$$),
    ('am_leader name 1 MB',           $$SELECT am_leader(repeat('x', 1048576), 'h')$$),
    -- rejected by the server before the function is called
    ('name with chr(0)',              $$SELECT try_acquire_leader('a' || chr(0), '1 minute', 'h')$$),
    ('name not valid UTF-8',          $$SELECT try_acquire_leader(convert_from('\xc328'::bytea, 'UTF8'), '1 minute', 'h')$$),
    -- holders (22023)
    ('holder empty',                  $$SELECT try_acquire_leader('bad', '1 minute', '')$$),
    ('am_leader holder empty',        $$SELECT am_leader('bad', '')$$),
    ('release_leader holder empty',   $$SELECT release_leader('bad', '')$$),
    ('leader_term holder empty',      $$SELECT leader_term('bad', '')$$),
    ('assert_leader holder empty',    $$SELECT assert_leader('bad', NULL, '')$$),
    ('wait_for_leadership holder empty', $$SELECT wait_for_leadership('bad', '1 minute', '0', '')$$),
    ('holder with \n',                $$SELECT try_acquire_leader('bad', '1 minute', E'h\nx')$$),
    ('holder with \t',                $$SELECT try_acquire_leader('bad', '1 minute', E'h\tx')$$),
    ('holder with \x01',              $$SELECT try_acquire_leader('bad', '1 minute', E'h\x01x')$$),
    ('holder with \x7f (DEL)',        $$SELECT try_acquire_leader('bad', '1 minute', E'h\x7fx')$$),
    ('holder with U+0085 (NEL)',      $$SELECT try_acquire_leader('bad', '1 minute', U&'h\0085x')$$),
    ('holder 256 bytes ASCII',        $$SELECT try_acquire_leader('bad', '1 minute', repeat('h', 256))$$),
    ('holder 256 bytes, 2-byte char last', $$SELECT try_acquire_leader('bad', '1 minute', repeat('h', 254) || U&'\00E9')$$),
    ('holder 1 MB',                   $$SELECT try_acquire_leader('bad', '1 minute', repeat('h', 1048576))$$),
    ('holder ''session:''',           $$SELECT try_acquire_leader('bad', '1 minute', 'session:')$$),
    ('holder ''session:123:456''',    $$SELECT try_acquire_leader('bad', '1 minute', 'session:123:456')$$),
    ('am_leader holder ''session:1''', $$SELECT am_leader('bad', 'session:1')$$),
    ('release_leader holder ''session:1''', $$SELECT release_leader('bad', 'session:1')$$),
    ('assert_leader holder ''session:1''', $$SELECT assert_leader('bad', NULL, 'session:1')$$),
    -- ttl (22023): positive, at least 100 ms, at most 7 days, no months
    ('ttl 0',                         $$SELECT try_acquire_leader('bad', '0', 'h')$$),
    ('ttl -5 s',                      $$SELECT try_acquire_leader('bad', '-5 s', 'h')$$),
    ('ttl -1 day',                    $$SELECT try_acquire_leader('bad', '-1 day', 'h')$$),
    ('ttl 1 day -24 hours (zero)',    $$SELECT try_acquire_leader('bad', '1 day -24 hours', 'h')$$),
    ('ttl 1 us',                      $$SELECT try_acquire_leader('bad', '1 microsecond', 'h')$$),
    ('ttl 99.999 ms',                 $$SELECT try_acquire_leader('bad', '99.999 ms', 'h')$$),
    ('ttl 7 days + 1 us',             $$SELECT try_acquire_leader('bad', '7 days 00:00:00.000001', 'h')$$),
    ('ttl 8 days',                    $$SELECT try_acquire_leader('bad', '8 days', 'h')$$),
    ('ttl 169 hours',                 $$SELECT try_acquire_leader('bad', '169 hours', 'h')$$),
    ('ttl 1 mon',                     $$SELECT try_acquire_leader('bad', '1 mon', 'h')$$),
    ('ttl 1 mon -30 days',            $$SELECT try_acquire_leader('bad', '1 mon -30 days', 'h')$$),
    ('ttl -1 mon',                    $$SELECT try_acquire_leader('bad', '-1 mon', 'h')$$),
    ('ttl 1 year',                    $$SELECT try_acquire_leader('bad', '1 year', 'h')$$),
    ('ttl 1000 years',                $$SELECT try_acquire_leader('bad', '1000 years', 'h')$$),
    ('ttl 178000000 years (max)',     $$SELECT try_acquire_leader('bad', '178000000 years', 'h')$$),
    ('ttl 2147483647 days',           $$SELECT try_acquire_leader('bad', '2147483647 days', 'h')$$),
    ('ttl -2147483648 days',          $$SELECT try_acquire_leader('bad', '-2147483648 days', 'h')$$),
    ('ttl max hours',                 $$SELECT try_acquire_leader('bad', '2562047788:00:54.775807', 'h')$$),
    ('ttl min hours',                 $$SELECT try_acquire_leader('bad', '-2562047788:00:54.775807', 'h')$$),
    ('ttl 1000000 days + max hours',  $$SELECT try_acquire_leader('bad', '1000000 days 2562047788:00:54.775807', 'h')$$),
    ('ttl -1000000 days + max hours', $$SELECT try_acquire_leader('bad', '-1000000 days 2562047788:00:54.775807', 'h')$$),
    ('ttl max days + max hours',      $$SELECT try_acquire_leader('bad', '2147483647 days 2562047788:00:54.775807', 'h')$$),
    ('wait_for_leadership ttl 0',     $$SELECT wait_for_leadership('bad', '0', '0', 'h')$$),
    ('wait_for_leadership ttl 1 mon', $$SELECT wait_for_leadership('bad', '1 mon', '0', 'h')$$),
    ('wait_for_leadership ttl 8 days', $$SELECT wait_for_leadership('bad', '8 days', '0', 'h')$$),
    -- wait_for_leadership timeout (22023): 0 to 36500 days, no months
    ('timeout -1 us',                 $$SELECT wait_for_leadership('bad', '1 minute', '-0.000001 s', 'h')$$),
    ('timeout -1 s',                  $$SELECT wait_for_leadership('bad', '1 minute', '-1 s', 'h')$$),
    ('timeout 1 mon',                 $$SELECT wait_for_leadership('bad', '1 minute', '1 mon', 'h')$$),
    ('timeout 1 year',                $$SELECT wait_for_leadership('bad', '1 minute', '1 year', 'h')$$),
    ('timeout 36501 days',            $$SELECT wait_for_leadership('bad', '1 minute', '36501 days', 'h')$$),
    ('timeout max days + max hours',  $$SELECT wait_for_leadership('bad', '1 minute', '2147483647 days 2562047788:00:54.775807', 'h')$$);

-- Run them all in one transaction, so a lock left behind by any of them
-- would still be visible to the check that follows.
BEGIN;
SELECT id, input, pg_temp.try(sql) AS result FROM bad_cases ORDER BY id;
-- Nothing changed: no lease row, no history row, no advisory lock (neither
-- a writer lock, objsubid 19525, nor a session liveness lock, 19526).
SELECT (SELECT count(*) FROM leader_election.leases) AS lease_rows,
       (SELECT count(*) FROM leader_election.history) AS history_rows,
       (SELECT count(*) FROM pg_locks
         WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks;
COMMIT;
SELECT (SELECT count(*) FROM leader_election.leases) AS lease_rows,
       (SELECT count(*) FROM leader_election.history) AS history_rows,
       (SELECT count(*) FROM pg_locks
         WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks;

-- Every bad row also fails alone at top level, leaving no trace (a few, as
-- plain statements so the psql error output is part of the spec).
SELECT try_acquire_leader(NULL, '1 minute', 'h');
SELECT try_acquire_leader('bad', NULL);
SELECT try_acquire_leader(repeat('x', 1048576), '1 minute');
SELECT try_acquire_leader('bad', '1 mon');
SELECT try_acquire_leader('bad', '50 ms');
SELECT try_acquire_leader('bad', '1 minute', 'session:1:2');
SELECT (SELECT count(*) FROM leader_election.leases) AS lease_rows,
       (SELECT count(*) FROM leader_election.history) AS history_rows,
       (SELECT count(*) FROM pg_locks
         WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks;

-- No term was consumed: the first good acquisition of 'bad' gets term 1.
SELECT try_acquire_leader('bad', '1 minute', 'h') AS acquired, leader_term('bad', 'h') AS term;

-- A cancelled call (statement_timeout) changes nothing either.
SET statement_timeout = '200ms';
SELECT try_acquire_leader('cancelled', '1 minute', 'h'), pg_sleep(5);
-- wait_for_leadership with no timeout is interrupted by statement_timeout.
SELECT wait_for_leadership('bad', '1 minute', NULL, 'someone-else');
RESET statement_timeout;
SELECT count(*) AS cancelled_rows FROM leader_election.leases WHERE name = 'cancelled';
SELECT holder, term FROM current_leader('bad');

--
-- Accepted edge cases.
--
TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
-- holder NULL: the default (session) identity
SELECT try_acquire_leader('null-holder', '1 minute', NULL) AS acquired,
       am_leader('null-holder') AS session_leads;
SELECT holder LIKE 'session:%' AS session_holder, session_bound FROM current_leader('null-holder');
-- 255 bytes, ASCII and with a multibyte character at the end
SELECT try_acquire_leader(repeat('x', 255), '1 minute', repeat('h', 255)) AS ascii_255,
       try_acquire_leader(repeat('x', 253) || U&'\00E9', '1 minute', repeat('h', 253) || U&'\00E9') AS two_byte_255,
       try_acquire_leader(repeat('x', 251) || U&'\+01F600', '1 minute', 'h') AS four_byte_255;
SELECT octet_length(name) AS name_bytes, length(name) AS name_chars,
       octet_length(holder) AS holder_bytes, term
  FROM leader_election.leases WHERE name LIKE 'xxx%' ORDER BY name COLLATE "C";
SELECT am_leader(repeat('x', 255), repeat('h', 255)) AS leads_255;
-- Printable Unicode, spaces and punctuation are fine.
SELECT try_acquire_leader(U&'r\00E9port nightly/eu-west #1', '1 minute', 'h') AS unicode_name;
-- 'session' without the colon, or not at the start, is an ordinary holder.
SELECT try_acquire_leader('prefix-1', '1 minute', 'session') AS holder_session,
       try_acquire_leader('prefix-2', '1 minute', 'my-session:1') AS holder_inner_session,
       try_acquire_leader('prefix-3', '1 minute', 'Session:1') AS holder_capital_session;
-- ttl bounds: 100 ms and 7 days are accepted, a day is exactly 24 hours
-- whatever the time zone does, fractional seconds are kept.
SET TimeZone = 'America/New_York';
SELECT try_acquire_leader('ttl-100ms', '100 ms', 'h') AS ttl_100ms,
       try_acquire_leader('ttl-1.5s', '1.5 s', 'h') AS ttl_1_5s,
       try_acquire_leader('ttl-1day', '1 day', 'h') AS ttl_1day,
       try_acquire_leader('ttl-7days', '7 days', 'h') AS ttl_7days,
       try_acquire_leader('ttl-168h', '168 hours', 'h') AS ttl_168h,
       try_acquire_leader('ttl-mixed', '1 day -23 hours', 'h') AS ttl_mixed_signs;
SELECT name, extract(epoch FROM expires_at - renewed_at) AS ttl_seconds
  FROM leader_election.leases WHERE name LIKE 'ttl-%' ORDER BY name;
RESET TimeZone;
-- timeout bounds: 0 (try once) and 36500 days are accepted; with a free
-- lease wait_for_leadership returns at once.
SELECT wait_for_leadership('timeout-0', '1 minute', '0', 'h') AS timeout_0,
       wait_for_leadership('timeout-max', '1 minute', '36500 days', 'h') AS timeout_36500_days,
       wait_for_leadership('timeout-null', '1 minute', NULL, 'h') AS timeout_null;
-- 'infinity' and '-infinity' (PostgreSQL 17 and later; earlier majors
-- cannot parse them) are refused as not finite, not as having months.
DO $$
DECLARE
    calls text[] := ARRAY[
        $c$SELECT try_acquire_leader('inf', 'infinity', 'h')$c$,
        $c$SELECT try_acquire_leader('inf', '-infinity', 'h')$c$,
        $c$SELECT wait_for_leadership('inf', '1 minute', 'infinity', 'h')$c$];
    c text;
BEGIN
    FOREACH c IN ARRAY calls LOOP
        BEGIN
            EXECUTE c;
            RAISE NOTICE '%: accepted', c;
        EXCEPTION WHEN others THEN
            RAISE NOTICE '%: refused, the message mentions months: %', c, SQLERRM LIKE '%month%';
        END;
    END LOOP;
END $$;

--
-- Byte-wise names: case and Unicode normalisation make different leases.
--
SELECT try_acquire_leader('Job', '1 minute', 'upper') AS "Job",
       try_acquire_leader('job', '1 minute', 'lower') AS "job",
       try_acquire_leader('JOB', '1 minute', 'caps') AS "JOB";
SELECT name, holder, term FROM leader_election.leases
 WHERE lower(name) = 'job' ORDER BY name COLLATE "C";
-- NFC U+00E9 and NFD e + U+0301
SELECT try_acquire_leader(U&'caf\00E9', '1 minute', 'nfc') AS nfc,
       try_acquire_leader(U&'cafe\0301', '1 minute', 'nfd') AS nfd;
SELECT name IS NFC NORMALIZED AS is_nfc, octet_length(name) AS bytes, holder, term
  FROM leader_election.leases WHERE name LIKE 'caf%' ORDER BY holder;
SELECT am_leader(U&'caf\00E9', 'nfd') AS nfd_leads_nfc, am_leader(U&'cafe\0301', 'nfd') AS nfd_leads_nfd;
-- Holders are byte-wise too.
SELECT am_leader('Job', 'UPPER') AS wrong_case_holder, am_leader('Job', 'upper') AS right_holder;

TRUNCATE leader_election.leases, leader_election.history;
ALTER SEQUENCE leader_election.terms RESTART;
