--
-- install: what CREATE EXTENSION leader_election creates, where, and with
-- which rights (DESIGN.md sections 3 and 6; anchors-reliability.md B.1.1).
--
-- The API functions live in the schema the extension is installed into
-- (public here); state lives in the fixed schema leader_election.  No
-- PUBLIC EXECUTE on the API, no PUBLIC rights on the lease table, logged
-- tables, VOLATILE / PARALLEL UNSAFE / not STRICT functions, a COMMENT on
-- every object.
--

-- pg_regress installed the extension with --load-extension; reinstall it
-- so this file tests a fresh install.
DROP EXTENSION leader_election;
SELECT count(*) AS leftover_schemas FROM pg_namespace WHERE nspname = 'leader_election';
CREATE EXTENSION leader_election;

-- The control file: not relocatable, not trusted, superuser only.
SELECT name, default_version, installed_version, comment IS NOT NULL AS has_comment
  FROM pg_available_extensions WHERE name = 'leader_election';
SELECT version, superuser, trusted, relocatable, schema
  FROM pg_available_extension_versions WHERE name = 'leader_election';
SELECT extname, extversion, extrelocatable, extnamespace::regnamespace AS schema
  FROM pg_extension WHERE extname = 'leader_election';

-- Every member object (the \dx+ listing), from pg_depend, and whether it
-- has a COMMENT.  The row types of the tables and the view (and their
-- array types) are left out: PostgreSQL 17 records them as members too,
-- older majors do not.
SELECT pg_describe_object(classid, objid, objsubid) AS object,
       obj_description(objid, (SELECT relname FROM pg_class WHERE oid = classid)) IS NOT NULL
           AS has_comment
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leader_election')
   AND NOT (classid = 'pg_type'::regclass
            AND EXISTS (SELECT FROM pg_type t
                         WHERE t.oid = objid
                           AND (t.typrelid <> 0
                                OR EXISTS (SELECT FROM pg_type e
                                            WHERE e.oid = t.typelem AND e.typrelid <> 0))))
 ORDER BY 1;

-- Functions: schema, signature, result, volatility, parallel safety,
-- strictness, security, comment.
SELECT p.pronamespace::regnamespace AS schema,
       p.oid::regprocedure AS function,
       p.prorettype::regtype AS returns, p.proretset AS set,
       p.provolatile AS volatile, p.proparallel AS parallel, p.proisstrict AS strict,
       p.prosecdef AS security_definer,
       (SELECT lanname FROM pg_language WHERE oid = p.prolang) AS language,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS has_comment
  FROM pg_proc p
 WHERE p.oid IN (SELECT objid FROM pg_depend
                  WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
                    AND classid = 'pg_proc'::regclass
                    AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'leader_election'))
 ORDER BY p.pronamespace::regnamespace::text DESC, p.proname;
-- Argument names and defaults are part of the contract.
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
   AND p.proname IN ('try_acquire_leader', 'am_leader', 'release_leader', 'wait_for_leadership',
                     'leader_term', 'assert_leader', 'current_leader')
 ORDER BY 1;
-- Nothing of the API leaks into leader_election, and nothing of the state
-- into public.
SELECT n.nspname, c.relname, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname IN ('public', 'leader_election') ORDER BY 1, 2;

-- EXECUTE privileges of the API: nobody but the owner (PUBLIC revoked).
SELECT p.proname,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute,
       coalesce((SELECT string_agg(a.grantee::regrole::text || '=' || a.privilege_type, ', ')
                   FROM aclexplode(p.proacl) a
                  WHERE a.grantee <> p.proowner), '') AS other_grants
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace
 ORDER BY 1;
-- The two helpers in leader_election are callable by anyone, by design: the
-- leaders view needs them and they reveal only liveness and waiter counts.
SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p WHERE p.pronamespace = 'leader_election'::regnamespace ORDER BY 1;

-- Triggers: only the lease cache's, on leases, firing on every change even
-- under session_replication_role = replica (tgenabled 'A').
SELECT t.tgrelid::regclass AS "table", t.tgname, t.tgenabled,
       pg_get_triggerdef(t.oid) AS definition
  FROM pg_trigger t
 WHERE t.tgrelid IN (SELECT oid FROM pg_class
                      WHERE relnamespace = 'leader_election'::regnamespace)
   AND NOT t.tgisinternal
 ORDER BY 1, 2;
-- Tables and the view: persistence, options, RLS, rights of PUBLIC.
SELECT c.relname, c.relkind, c.relpersistence, c.reloptions,
       c.relrowsecurity AS rls, c.relforcerowsecurity AS force_rls,
       obj_description(c.oid, 'pg_class') IS NOT NULL AS has_comment
  FROM pg_class c
 WHERE c.relnamespace = 'leader_election'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY 1;
SELECT c.relname, p.privilege_type
  FROM pg_class c, LATERAL aclexplode(c.relacl) p
 WHERE c.relnamespace = 'leader_election'::regnamespace AND p.grantee = 0
 ORDER BY 1, 2;
SELECT c.relname,
       has_table_privilege('public', c.oid, 'SELECT') AS public_select,
       has_table_privilege('public', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE') AS public_write
  FROM pg_class c
 WHERE c.relnamespace = 'leader_election'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY 1;
SELECT polname, polrelid::regclass, polcmd, pg_get_expr(polqual, polrelid) AS using_expr
  FROM pg_policy WHERE polrelid = 'leader_election.history'::regclass;
-- Names are compared byte-wise: COLLATE "C" on every name and holder column.
SELECT attrelid::regclass AS relation, attname, attcollation::regcollation AS collation
  FROM pg_attribute
 WHERE attrelid IN ('leader_election.leases'::regclass, 'leader_election.history'::regclass)
   AND attname IN ('name', 'holder')
 ORDER BY 1, 2;
-- Indexes: only the primary keys (renewals stay HOT).
SELECT indexrelid::regclass AS index, indisprimary, pg_get_indexdef(indexrelid) AS definition
  FROM pg_index
 WHERE indrelid IN ('leader_election.leases'::regclass, 'leader_election.history'::regclass)
 ORDER BY 1;
-- The schema: owned by the installing superuser, commented, and no CREATE
-- for PUBLIC.
SELECT nspname, nspowner::regrole = current_user::regrole AS owned_by_installer,
       has_schema_privilege('public', oid, 'CREATE') AS public_create,
       obj_description(oid, 'pg_namespace') IS NOT NULL AS has_comment
  FROM pg_namespace WHERE nspname = 'leader_election';

-- Settings, once the library is loaded.
SELECT am_leader('load-the-library', 'h') AS loaded;
SELECT name, setting, context, vartype
  FROM pg_settings WHERE name LIKE 'leader_election.%' ORDER BY 1;

-- Security: a schema named leader_election made beforehand is never
-- adopted; the install fails instead.
DROP EXTENSION leader_election;
CREATE SCHEMA leader_election;
-- (terse: PostgreSQL 18 adds the script's line as CONTEXT)
\set VERBOSITY terse
CREATE EXTENSION leader_election;
\set VERBOSITY default
DROP SCHEMA leader_election;
-- CREATE EXTENSION ... SCHEMA puts the API there (state stays in
-- leader_election); it cannot move afterwards: not relocatable.
CREATE SCHEMA le_elsewhere;
CREATE EXTENSION leader_election SCHEMA le_elsewhere;
SELECT p.pronamespace::regnamespace AS schema, count(*) AS functions
  FROM pg_proc p WHERE p.proname IN ('try_acquire_leader', 'am_leader', 'release_leader',
                                     'wait_for_leadership', 'leader_term', 'assert_leader',
                                     'current_leader')
 GROUP BY 1;
SELECT le_elsewhere.try_acquire_leader('elsewhere', '1 minute', 'h') AS works_there,
       le_elsewhere.leader_term('elsewhere', 'h') AS term;
ALTER EXTENSION leader_election SET SCHEMA public;
SELECT count(*) AS leases_table_in_state_schema
  FROM pg_class WHERE relname = 'leases' AND relnamespace = 'leader_election'::regnamespace;
DROP EXTENSION leader_election;
DROP SCHEMA le_elsewhere;

-- Not trusted: a role with CREATE on the database still may not install it.
CREATE ROLE regress_le_installer;
GRANT CREATE ON DATABASE contrib_regression TO regress_le_installer;
SET ROLE regress_le_installer;
CREATE EXTENSION leader_election;
RESET ROLE;
REVOKE CREATE ON DATABASE contrib_regression FROM regress_le_installer;
DROP ROLE regress_le_installer;

-- Leave it installed, in public, for the tests that follow.
CREATE EXTENSION leader_election;
SELECT extnamespace::regnamespace AS schema FROM pg_extension WHERE extname = 'leader_election';
