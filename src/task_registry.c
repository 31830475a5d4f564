/*-------------------------------------------------------------------------
 *
 * task_registry.c
 *	  What a task is: the SQL functions that register, unregister, enable
 *	  and disable tasks, the checks a task must pass to run, and reading
 *	  tasks for the launcher and the workers.
 *
 * register_task() stores a row of leader_election.tasks for the calling
 * role, and alter_task() changes one in place, after the same checks (le_task_problem) that the launcher makes
 * before starting a worker and the worker makes before every run, so a
 * task that registers is one that can run, and one that no longer can is
 * disabled with the same words.  Ordinary roles have no write access to the
 * task tables: every write goes through le_exec_as_task_tables_owner(),
 * with parameters only, never concatenated values.
 *
 * This file never starts, stops or signals a worker and never takes a
 * lease: register_task claims the task's lease name for its owner
 * (le_claim_name, lease.c I8), and only the worker ever takes the lease.  The design of the runner is in
 * task_runner.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "task_runner.h"

PG_FUNCTION_INFO_V1(register_task);
PG_FUNCTION_INFO_V1(unregister_task);
PG_FUNCTION_INFO_V1(enable_task);
PG_FUNCTION_INFO_V1(disable_task);
PG_FUNCTION_INFO_V1(alter_task);

#define LE_TASK_MIN_USECS		USECS_PER_SEC
#define LE_TASK_MAX_TTL_USECS	USECS_PER_DAY
#define LE_TASK_MAX_EVERY_USECS	(7 * USECS_PER_DAY)

/*
 * Everything about a task and its owner and procedure, in one query over
 * a source of task rows (the tasks table, or the values register_task is
 * about to store).  The privilege functions are only called for objects
 * that exist.  Runs under any role: pg_roles and pg_proc are public, and
 * the tasks row is visible to its owner (and to the launcher's superuser).
 * Columns in the order le_task_from_tuple() reads them.
 */
static char *
le_task_query(const char *source, const char *tail)
{
	return psprintf(
					"SELECT t.id, t.name, t.owner, p.oid,"
					"  (pg_catalog.date_part('epoch', t.ttl) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,"
					"  (pg_catalog.date_part('epoch', t.run_every) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,"
					"  t.enabled,"
					"  r.oid IS NOT NULL, r.rolname::pg_catalog.text, r.rolcanlogin,"
					"  CASE WHEN r.oid IS NOT NULL THEN (SELECT s.rolname::pg_catalog.text"
					"       FROM pg_catalog.pg_roles AS s WHERE s.rolsuper"
					"       AND pg_catalog.pg_has_role(t.owner, s.oid, 'MEMBER')"
					"       ORDER BY s.oid OPERATOR(pg_catalog.<>) t.owner, s.rolname LIMIT 1) END,"
					"  CASE WHEN r.oid IS NOT NULL THEN pg_catalog.has_database_privilege(t.owner,"
					"       pg_catalog.current_database(), 'CONNECT') END,"
					"  p.oid IS NOT NULL, n.nspname::pg_catalog.text, p.proname::pg_catalog.text,"
					"  t.procedure::pg_catalog.text, p.prokind::pg_catalog.text, p.pronargs::pg_catalog.int4,"
					"  CASE WHEN p.pronargs OPERATOR(pg_catalog.>) 0 THEN p.proargtypes[0] END,"
					"  p.proallargtypes IS NULL,"
					"  CASE WHEN r.oid IS NOT NULL AND p.oid IS NOT NULL THEN"
					"       pg_catalog.has_schema_privilege(t.owner, p.pronamespace, 'USAGE') AND"
					"       pg_catalog.has_function_privilege(t.owner, p.oid, 'EXECUTE') END,"
					"  r.rolvaliduntil OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp(),"
					"  r.rolvaliduntil::pg_catalog.text,"
					"  CASE WHEN r.oid IS NOT NULL AND p.oid IS NOT NULL THEN"
					"       pg_catalog.pg_has_role(p.proowner, t.owner, 'USAGE') END,"
					"  pg_catalog.pg_get_userbyid(p.proowner)::pg_catalog.text"
					" FROM %s AS t"
					" LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) t.owner"
					" LEFT JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=)"
					"   pg_catalog.to_regprocedure(t.procedure::pg_catalog.text)::pg_catalog.oid"
					" LEFT JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace"
					" %s",
					source, tail);
}

/* ---- reading SPI results ---- */

static bool
le_spi_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

int64
le_spi_int64(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

static Oid
le_spi_oid(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

/* Fill *t from a row of le_task_query(); strings in the current context. */
static void
le_task_from_tuple(HeapTuple tup, TupleDesc desc, LeTask *t)
{
	char	   *kind;
	bool		isnull;

	memset(t, 0, sizeof(LeTask));
	t->id = le_spi_int64(tup, desc, 1);
	t->name = SPI_getvalue(tup, desc, 2);
	t->owner = le_spi_oid(tup, desc, 3);
	t->procedure = le_spi_oid(tup, desc, 4);
	t->ttl_usecs = le_spi_int64(tup, desc, 5);
	t->every_usecs = le_spi_int64(tup, desc, 6);
	t->enabled = le_spi_bool(tup, desc, 7);
	t->role_exists = le_spi_bool(tup, desc, 8);
	t->role_name = SPI_getvalue(tup, desc, 9);
	t->can_login = le_spi_bool(tup, desc, 10);
	t->super_role = SPI_getvalue(tup, desc, 11);
	t->superuser = (t->super_role != NULL);
	t->can_connect = le_spi_bool(tup, desc, 12);
	t->proc_exists = le_spi_bool(tup, desc, 13);
	t->proc_schema = SPI_getvalue(tup, desc, 14);
	t->proc_name = SPI_getvalue(tup, desc, 15);
	t->proc_text = SPI_getvalue(tup, desc, 16);
	kind = SPI_getvalue(tup, desc, 17);
	t->prokind = kind ? kind[0] : '\0';
	t->nargs = DatumGetInt32(SPI_getbinval(tup, desc, 18, &isnull));
	if (isnull)
		t->nargs = -1;
	t->arg0 = le_spi_oid(tup, desc, 19);
	t->only_in_args = le_spi_bool(tup, desc, 20);
	t->can_execute = le_spi_bool(tup, desc, 21);
	t->expired = le_spi_bool(tup, desc, 22);
	t->valid_until = SPI_getvalue(tup, desc, 23);
	t->has_proc_owner_privs = le_spi_bool(tup, desc, 24);
	t->proc_owner_name = SPI_getvalue(tup, desc, 25);
}

/*
 * Does the task's lease name now belong to a role whose privileges the
 * task's owner does not have (a name handed to another role by
 * assign_name after register_task claimed it)?  Read from the table with
 * the writers' own lookup, which row-level security does not filter.
 */
static void
le_task_check_name(LeTask *t)
{
	LeaseRow	row;

	le_store_read(t->name, &row);
	t->name_foreign = row.found && row.owner != t->owner &&
		!has_privs_of_role(t->owner, row.owner);
}

/* ---- the checks ---- */

/*
 * Why the task cannot run now, or NULL, and in *code the SQLSTATE with
 * which registration refuses it.  The same checks at registration, before
 * the launcher starts a worker, and before every run.
 */
static char *
le_task_check(const LeTask *t, int *code)
{
	*code = ERRCODE_INSUFFICIENT_PRIVILEGE;
	if (!t->role_exists)
		return psprintf("the owner role (OID %u) no longer exists", t->owner);
	if (!t->can_login)
		return psprintf("role \"%s\" cannot log in (task workers connect as the task's owner, which needs LOGIN)",
						t->role_name);
	if (t->expired)
		return psprintf("role \"%s\" has expired (VALID UNTIL %s)",
						t->role_name, t->valid_until);
	if (t->superuser && !le_allow_superuser_tasks)
	{
		if (strcmp(t->super_role, t->role_name) == 0)
			return psprintf("role \"%s\" is a superuser and leader_election.allow_superuser_tasks is off",
							t->role_name);
		return psprintf("role \"%s\" is a member of superuser role \"%s\" and leader_election.allow_superuser_tasks is off",
						t->role_name, t->super_role);
	}
	if (!t->can_connect)
		return psprintf("role \"%s\" lacks CONNECT on this database", t->role_name);
	*code = ERRCODE_WRONG_OBJECT_TYPE;
	if (!t->proc_exists)
		return psprintf("procedure %s no longer exists (dropped, or renamed)", t->proc_text);
	if (t->prokind != 'p')
		return psprintf("%s is not a procedure", t->proc_text);
	*code = ERRCODE_INVALID_FUNCTION_DEFINITION;
	if (!t->only_in_args ||
		!(t->nargs == 0 || (t->nargs == 1 && t->arg0 == INT8OID)))
		return psprintf("procedure %s must take no arguments or a single bigint (the term)",
						t->proc_text);
	*code = ERRCODE_INSUFFICIENT_PRIVILEGE;
	if (!t->can_execute)
		return psprintf("role \"%s\" lacks EXECUTE on procedure %s (or USAGE on its schema)",
						t->role_name, t->proc_text);
	if (!t->has_proc_owner_privs)
		return psprintf("procedure %s is owned by role \"%s\", which does not have the privileges of role \"%s\" (it, and every member of it, could change what the task runs)",
						t->proc_text, t->proc_owner_name ? t->proc_owner_name : "?",
						t->role_name);
	if (t->name_foreign)
		return psprintf("the lease name \"%s\" belongs to another role", t->name);
	return NULL;
}

char *
le_task_problem(const LeTask *t)
{
	int			code;

	return le_task_check(t, &code);
}

/* The SQLSTATE with which registration refuses a task with a problem. */
int
le_task_problem_code(const LeTask *t)
{
	int			code;

	(void) le_task_check(t, &code);
	return code;
}

/* ---- reading tasks (in the caller's SPI connection) ---- */

/*
 * Load one task by id into *t, strings in into.  False if it is not there
 * (or not visible to the current role).
 */
bool
le_task_load(int64 task_id, LeTask *t, MemoryContext into)
{
	MemoryContext old;
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	int			rc;

	values[0] = Int64GetDatum(task_id);
	rc = SPI_execute_with_args(le_task_query("leader_election.tasks",
											 "WHERE t.id OPERATOR(pg_catalog.=) $1"),
							   1, types, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading leader_election.tasks failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return false;
	old = MemoryContextSwitchTo(into);
	le_task_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, t);
	le_task_check_name(t);
	MemoryContextSwitchTo(old);
	return true;
}

/* The enabled tasks, in id order, allocated in into; *ntasks of them. */
LeTask *
le_task_load_enabled(MemoryContext into, int *ntasks)
{
	MemoryContext old;
	LeTask	   *tasks;
	int			rc;

	rc = SPI_execute(le_task_query("leader_election.tasks",
								   "WHERE t.enabled ORDER BY t.id"),
					 true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading leader_election.tasks failed: %s", SPI_result_code_string(rc));
	*ntasks = (int) SPI_processed;
	old = MemoryContextSwitchTo(into);
	tasks = palloc0(sizeof(LeTask) * Max(*ntasks, 1));
	for (int k = 0; k < *ntasks; k++)
		le_task_from_tuple(SPI_tuptable->vals[k], SPI_tuptable->tupdesc, &tasks[k]);
	for (int k = 0; k < *ntasks; k++)
		le_task_check_name(&tasks[k]);
	MemoryContextSwitchTo(old);
	return tasks;
}

/* ---- writing, with the task tables' owner's rights ---- */

/* leader_election.tasks and task_runs, as le_tasks_table_owner found them. */
static Oid	le_task_tables[2];

/* Owner of leader_election.tasks: internal writes run as that role. */
static Oid
le_tasks_table_owner(void)
{
	Oid			nsp = get_namespace_oid("leader_election", false);
	HeapTuple	tup;
	Oid			owner;

	le_task_tables[0] = get_relname_relid("tasks", nsp);
	le_task_tables[1] = get_relname_relid("task_runs", nsp);
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(le_task_tables[0]));
	if (!OidIsValid(le_task_tables[1]) || !HeapTupleIsValid(tup))
		elog(ERROR, "cannot find leader_election.tasks");
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * For owner_rights.c's O3: lock both task tables as the statements will,
 * then say whether either carries code an administrator added.
 */
static bool
le_task_tables_lock_and_decide(void)
{
	LOCKMODE	mode = XactReadOnly || RecoveryInProgress() ?
		AccessShareLock : RowExclusiveLock;
	bool		added = false;

	for (int i = 0; i < lengthof(le_task_tables); i++)
	{
		Relation	rel = table_open(le_task_tables[i], mode);

		added |= le_rel_runs_added_code(rel, NULL);
		table_close(rel, NoLock);
	}
	return added;
}

/*
 * Run a statement with the task table owner's rights: ordinary roles have
 * no write access to the task tables (the pg_cron pattern).  Parameters
 * only, never concatenated values.
 */
int
le_exec_as_task_tables_owner(const char *sql, int nargs, Oid *types, Datum *values,
							 const char *nulls, bool read_only, long count)
{
	LeOwnerRights rights;
	int			rc;

	le_owner_rights_begin_statements(&rights, le_tasks_table_owner(),
									 le_task_tables_lock_and_decide);
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, count);
	le_owner_rights_end(&rights);
	if (rc < 0)
		elog(ERROR, "task runner statement failed: %s", SPI_result_code_string(rc));
	return rc;
}

/*
 * Keep the newest leader_election.task_runs_max rows of a task (after every
 * row the runner adds: a run's end, a disabled task's 'skipped' row).
 */
void
le_task_runs_trim(int64 task_id)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2];

	values[0] = Int64GetDatum(task_id);
	values[1] = Int32GetDatum(le_task_runs_max);
	le_exec_as_task_tables_owner("DELETE FROM leader_election.task_runs"
								 " WHERE task_id OPERATOR(pg_catalog.=) $1 AND id OPERATOR(pg_catalog.<=)"
								 " (SELECT r.id FROM leader_election.task_runs AS r"
								 "   WHERE r.task_id OPERATOR(pg_catalog.=) $1"
								 "   ORDER BY r.id DESC OFFSET $2 LIMIT 1)",
								 2, types, values, NULL, false, 0);
}

/*
 * Disable a task the runner cannot run: the task disabled with the reason,
 * a 'skipped' run with the same reason, and a log line.  A task row that
 * another session has locked is left alone (false): the runner never
 * waits for one role's transaction; it tries again on its next scan.
 */
bool
le_task_disable(const LeTask *t, const char *reason)
{
	Oid			types[4] = {INT8OID, TEXTOID, OIDOID, TEXTOID};
	Datum		values[4];

	values[0] = Int64GetDatum(t->id);
	values[1] = CStringGetTextDatum(t->name);
	values[2] = ObjectIdGetDatum(t->owner);
	values[3] = CStringGetTextDatum(reason);
	le_exec_as_task_tables_owner(le_store_schema_1_0() ?
								 "UPDATE leader_election.tasks SET enabled = false, disabled_reason = $4,"
								 " last_status = 'skipped'"
								 " WHERE id OPERATOR(pg_catalog.=) (SELECT l.id FROM leader_election.tasks AS l"
								 "   WHERE l.id OPERATOR(pg_catalog.=) $1 AND l.name OPERATOR(pg_catalog.=) $2"
								 "   AND l.owner OPERATOR(pg_catalog.=) $3 FOR NO KEY UPDATE SKIP LOCKED)" :
								 "UPDATE leader_election.tasks SET enabled = false, disabled_reason = $4,"
								 " last_status = 'skipped', runner_state = NULL"
								 " WHERE id OPERATOR(pg_catalog.=) (SELECT l.id FROM leader_election.tasks AS l"
								 "   WHERE l.id OPERATOR(pg_catalog.=) $1 AND l.name OPERATOR(pg_catalog.=) $2"
								 "   AND l.owner OPERATOR(pg_catalog.=) $3 FOR NO KEY UPDATE SKIP LOCKED)",
								 4, types, values, NULL, false, 0);
	if (SPI_processed == 0)
		return false;
	le_exec_as_task_tables_owner("INSERT INTO leader_election.task_runs"
								 " (task_id, task_name, owner, started_at, finished_at, status, error, pid)"
								 " VALUES ($1, $2, $3, pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),"
								 " 'skipped', $4, pg_catalog.pg_backend_pid())",
								 4, types, values, NULL, false, 0);
	le_task_runs_trim(t->id);
	ereport(LOG,
			(errmsg("leader_election: task \"%s\" disabled: %s", t->name, reason),
			 errhint("Fix the cause, then call leader_election.enable_task(%s).",
					 quote_literal_cstr(t->name))));
	return true;
}

/*
 * Show what the runner does with a task in tasks.runner_state, if that
 * changes it and the row is not locked by another session; true if the
 * row now says state.
 */
bool
le_task_set_state(int64 task_id, const char *state)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2];

	/*
	 * The 1.0 objects (before ALTER EXTENSION UPDATE) have no runner_state:
	 * not written, so that it is written once the update has added it.
	 */
	if (le_store_schema_1_0())
		return false;
	values[0] = Int64GetDatum(task_id);
	values[1] = CStringGetTextDatum(state);
	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET runner_state = $2"
								 " WHERE id OPERATOR(pg_catalog.=) (SELECT l.id FROM leader_election.tasks AS l"
								 "   WHERE l.id OPERATOR(pg_catalog.=) $1"
								 "   AND l.runner_state IS DISTINCT FROM $2 FOR NO KEY UPDATE SKIP LOCKED)",
								 2, types, values, NULL, false, 0);
	if (SPI_processed == 1)
		return true;
	le_exec_as_task_tables_owner("SELECT 1 FROM leader_election.tasks WHERE id OPERATOR(pg_catalog.=) $1"
								 " AND runner_state OPERATOR(pg_catalog.=) $2",
								 2, types, values, NULL, true, 1);
	return SPI_processed == 1;
}

/*
 * When the task's last run started (runs that were skipped never started),
 * for "every run_every, start to start" across restarts; 0 if it never ran.
 */
int64
le_task_last_start(int64 task_id, TimestampTz *started_at)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;
	Datum		d;

	values[0] = Int64GetDatum(task_id);
	le_exec_as_task_tables_owner("SELECT pg_catalog.max(started_at) FROM leader_election.task_runs"
								 " WHERE task_id OPERATOR(pg_catalog.=) $1"
								 " AND status OPERATOR(pg_catalog.<>) 'skipped'",
								 1, types, values, NULL, true, 1);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	*started_at = isnull ? 0 : DatumGetTimestampTz(d);
	return isnull ? 0 : 1;
}

/* ---- SQL-callable functions ---- */

/* The task's id and owner by name, as the table owner sees it; false if none. */
static bool
le_find_task(const char *name, int64 *id, Oid *owner)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(name);
	le_exec_as_task_tables_owner("SELECT id, owner FROM leader_election.tasks"
								 " WHERE name OPERATOR(pg_catalog.=) $1",
								 1, types, values, NULL, true, 1);
	if (SPI_processed == 0)
		return false;
	*id = le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	*owner = le_spi_oid(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	return true;
}

/*
 * Run sql on the caller's own task called name: $1 is the task's id, the
 * other parameters are values[1..].  False if there is no such task; 42501
 * if it belongs to a role the caller is not a member of.
 */
static bool
le_change_own_task(const char *name, const char *function, const char *sql,
				   int nargs, Oid *types, Datum *values)
{
	int64		id;
	Oid			owner;
	bool		found;

	PreventCommandDuringRecovery(function);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	found = le_find_task(name, &id, &owner);
	if (found)
	{
		if (!has_privs_of_role(GetUserId(), owner))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for task \"%s\"", name),
					 errdetail("The task belongs to another role.")));
		values[0] = Int64GetDatum(id);
		le_exec_as_task_tables_owner(sql, nargs, types, values, NULL, false, 0);
	}
	SPI_finish();
	return found;
}

/*
 * How tasks.procedure keeps a procedure: its signature, schema-qualified
 * with qualified argument types (app.rollup(bigint)), which reads back to
 * the same procedure whatever the search_path.  Not its OID (a regprocedure
 * column): pg_upgrade keeps no function OIDs and refuses tables with such
 * columns.  The runner resolves it at every scan (le_task_query), so a
 * renamed or dropped procedure disables the task with the reason.
 */
static Datum
le_procedure_signature(Oid procedure)
{
	if (!SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(procedure)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("procedure with OID %u does not exist", procedure)));
	return CStringGetTextDatum(format_procedure_qualified(procedure));
}

/*
 * leader_election.register_task(name text, procedure regprocedure,
 *								 run_every interval, ttl interval) returns bigint
 */
Datum
register_task(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Oid			me = GetUserId();
	Oid			types[5] = {TEXTOID, OIDOID, TEXTOID, INTERVALOID, INTERVALOID};
	Datum		values[5];
	LeTask		t;
	char	   *problem;
	int64		id;
	Oid			other_owner;
	int			rc;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("procedure must not be null")));
	(void) le_checked_interval(fcinfo, 2, "run_every", LE_TASK_MIN_USECS,
							   LE_TASK_MAX_EVERY_USECS, "1 second and 7 days");
	(void) le_checked_interval(fcinfo, 3, "ttl", LE_TASK_MIN_USECS,
							   LE_TASK_MAX_TTL_USECS, "1 second and 1 day");
	PreventCommandDuringRecovery("register_task()");

	/*
	 * The lease name must not belong to another role (lease.c, I8); a new
	 * name becomes the caller's now, so that no other role can take it
	 * before the first run.  Rolled back with the registration if a check
	 * below fails.
	 */
	le_claim_name(name);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (le_find_task(name, &id, &other_owner))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("task \"%s\" already exists", name)));
	le_lock_new_owner(GetUserId(), true);

	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(me);
	values[2] = le_procedure_signature(PG_GETARG_OID(1));
	values[3] = PG_GETARG_DATUM(2);
	values[4] = PG_GETARG_DATUM(3);

	/* The same checks the runner makes, on the values about to be stored. */
	rc = SPI_execute_with_args(le_task_query("(SELECT 0::pg_catalog.int8 AS id,"
											 " $1::pg_catalog.text AS name,"
											 " $2::pg_catalog.oid AS owner,"
											 " $3 AS procedure,"
											 " $4::pg_catalog.interval AS run_every,"
											 " $5::pg_catalog.interval AS ttl,"
											 " true AS enabled)", ""),
							   5, types, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "checking the task failed");
	le_task_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &t);
	problem = le_task_problem(&t);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(le_task_problem_code(&t)),
				 errmsg("cannot register task \"%s\": %s", name, problem)));

	le_exec_as_task_tables_owner(le_store_schema_1_0() ?
								 "INSERT INTO leader_election.tasks (name, owner, procedure, run_every, ttl)"
								 " VALUES ($1, $2, $3::pg_catalog.regprocedure, $4, $5) RETURNING id" :
								 "INSERT INTO leader_election.tasks (name, owner, procedure, run_every, ttl)"
								 " VALUES ($1, $2, $3, $4, $5) RETURNING id",
								 5, types, values, NULL, false, 1);
	id = le_spi_int64(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	SPI_finish();

	if (!le_task_runner_preloaded || le_max_task_workers == 0)
		ereport(NOTICE,
				(errmsg("task \"%s\" is registered but will not run until leader_election is in shared_preload_libraries",
						name),
				 errhint("Add leader_election to shared_preload_libraries and restart the server.")));
	else if (!le_task_database_listed(get_database_name(MyDatabaseId)))
		ereport(NOTICE,
				(errmsg("task \"%s\" is registered but will not run: the task runner works in other databases",
						name),
				 errhint("The runner runs the tasks of the databases listed in leader_election.database.")));
	PG_RETURN_INT64(id);
}

/* leader_election.unregister_task(name text) returns boolean */
Datum
unregister_task(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Oid			types[1] = {INT8OID};
	Datum		values[1];

	PG_RETURN_BOOL(le_change_own_task(name, "unregister_task()",
									  "DELETE FROM leader_election.tasks"
									  " WHERE id OPERATOR(pg_catalog.=) $1",
									  1, types, values));
}

static Datum
le_set_enabled(FunctionCallInfo fcinfo, bool enabled)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Oid			types[2] = {INT8OID, BOOLOID};
	Datum		values[2];

	values[1] = BoolGetDatum(enabled);
	PG_RETURN_BOOL(le_change_own_task(name,
									  enabled ? "enable_task()" : "disable_task()",
									  le_store_schema_1_0() ?
									  "UPDATE leader_election.tasks SET enabled = $2, disabled_reason = NULL"
									  " WHERE id OPERATOR(pg_catalog.=) $1" :
									  "UPDATE leader_election.tasks SET enabled = $2, disabled_reason = NULL,"
									  " runner_state = CASE WHEN $2 THEN runner_state END"
									  " WHERE id OPERATOR(pg_catalog.=) $1",
									  2, types, values));
}

/* leader_election.enable_task(name text) returns boolean */
Datum
enable_task(PG_FUNCTION_ARGS)
{
	return le_set_enabled(fcinfo, true);
}

/* leader_election.disable_task(name text) returns boolean */
Datum
disable_task(PG_FUNCTION_ARGS)
{
	return le_set_enabled(fcinfo, false);
}

/*
 * leader_election.alter_task(name text, procedure regprocedure,
 *							  run_every interval, ttl interval) returns boolean
 *
 * Change a task in place; NULL keeps a value.  The same checks as
 * register_task, on the values the task will have.  The worker reads its
 * task every tick, so the change takes effect at its next campaign or run
 * (a run in progress finishes under the old values); no second worker
 * ever starts for the name.  False if there is no such task.
 */
Datum
alter_task(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Oid			types[4] = {INT8OID, TEXTOID, INTERVALOID, INTERVALOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	LeTask		t;
	char	   *problem;
	int64		id;
	Oid			owner;

	if (!PG_ARGISNULL(2))
		(void) le_checked_interval(fcinfo, 2, "run_every", LE_TASK_MIN_USECS,
								   LE_TASK_MAX_EVERY_USECS, "1 second and 7 days");
	if (!PG_ARGISNULL(3))
		(void) le_checked_interval(fcinfo, 3, "ttl", LE_TASK_MIN_USECS,
								   LE_TASK_MAX_TTL_USECS, "1 second and 1 day");
	PreventCommandDuringRecovery("alter_task()");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!le_find_task(name, &id, &owner))
	{
		SPI_finish();
		PG_RETURN_BOOL(false);
	}
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for task \"%s\"", name),
				 errdetail("The task belongs to another role.")));

	values[0] = Int64GetDatum(id);
	for (int i = 1; i <= 3; i++)
	{
		if (PG_ARGISNULL(i))
		{
			nulls[i] = 'n';
			values[i] = (Datum) 0;
		}
		else
			values[i] = i == 1 ? le_procedure_signature(PG_GETARG_OID(1)) : PG_GETARG_DATUM(i);
	}

	/* The same checks the runner makes, on the values the task will have. */
	le_exec_as_task_tables_owner(le_task_query("(SELECT o.id, o.name, o.owner,"
											   " COALESCE($2, o.procedure) AS procedure,"
											   " COALESCE($3, o.run_every) AS run_every,"
											   " COALESCE($4, o.ttl) AS ttl,"
											   " true AS enabled FROM leader_election.tasks AS o"
											   " WHERE o.id OPERATOR(pg_catalog.=) $1)", ""),
								 4, types, values, nulls, true, 1);
	if (SPI_processed != 1)
		elog(ERROR, "checking the task failed");
	le_task_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &t);
	le_task_check_name(&t);
	problem = le_task_problem(&t);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(le_task_problem_code(&t)),
				 errmsg("cannot alter task \"%s\": %s", name, problem)));

	le_exec_as_task_tables_owner("UPDATE leader_election.tasks SET"
									  " procedure = COALESCE($2, procedure),"
									  " run_every = COALESCE($3, run_every),"
									  " ttl = COALESCE($4, ttl)"
									  " WHERE id OPERATOR(pg_catalog.=) $1",
									  4, types, values, nulls, false, 0);
	SPI_finish();
	PG_RETURN_BOOL(true);
}
