/*-------------------------------------------------------------------------
 *
 * role_guard.c
 *	  DROP ROLE refuses a role that still owns lease names or tasks.
 *
 * Lease names and tasks are rows, not catalog objects, so PostgreSQL's own
 * dependency tracking does not see them: a role could be dropped while it
 * owned names, leaving them owned by a dangling OID that a role created
 * later with that OID (after OID wraparound, or in a cluster restored from
 * a dump, where pg_dump writes such an owner as a number) would inherit.
 * An object access hook on the drop of a role counts the role's names and
 * tasks in the current database and raises 2BP01 if there are any, before
 * anything is deleted.
 *
 * Limits, documented in the README: the hook runs only in backends that
 * loaded the library (all of them with shared_preload_libraries), and it
 * sees only the database where DROP ROLE runs.  It must never change
 * anything, and it reads with the tables' owner's rights (a role with
 * CREATEROLE need not be able to read them), as owner_rights.c says.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "leader_election.h"

static object_access_hook_type le_prev_object_access_hook = NULL;

/* Owner of relation relid, or InvalidOid if there is no such relation. */
static Oid
le_relation_owner(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

/* leader_election.leases and tasks, which the count reads. */
static Oid	le_counted[2];

/*
 * For owner_rights.c's O3: lock both tables as the count will, then say
 * whether either carries code an administrator added.
 */
static bool
le_counted_lock_and_decide(void)
{
	bool		added = false;

	for (int i = 0; i < lengthof(le_counted); i++)
	{
		Relation	rel = table_open(le_counted[i], AccessShareLock);

		added |= le_rel_runs_added_code(rel, i == 0 ? le_store_is_own_trigger : NULL);
		table_close(rel, NoLock);
	}
	return added;
}

static void
le_refuse_drop_of_owner(Oid roleid)
{
	Oid			nsp = get_namespace_oid("leader_election", true);
	Oid			leases;
	Oid			tasks;
	Oid			table_owner;
	LeOwnerRights rights;
	SPIPlanPtr	plan;
	Oid			argtypes[1] = {OIDOID};
	Datum		args[1];
	bool		isnull;
	int64		names = 0;
	int64		ntasks = 0;

	if (!OidIsValid(nsp) ||
		!le_extension_installed())
		return;
	leases = get_relname_relid("leases", nsp);
	tasks = get_relname_relid("tasks", nsp);
	if (!OidIsValid(leases) || !OidIsValid(tasks))
		return;
	table_owner = le_relation_owner(leases);
	if (!OidIsValid(table_owner))
		return;
	le_counted[0] = leases;
	le_counted[1] = tasks;

	/*
	 * Lock the role as DROP ROLE itself will, before counting: a first use
	 * of a name or task by the role locks it too (le_lock_new_owner), so
	 * one still in progress is waited for, and one that comes later waits
	 * for this drop.  Count what is committed now, whatever this
	 * transaction's snapshot (REPEATABLE READ would miss a name committed
	 * since it began).
	 */
	LockSharedObject(AuthIdRelationId, roleid, 0, AccessExclusiveLock);
	args[0] = ObjectIdGetDatum(roleid);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	le_owner_rights_begin_statements(&rights, table_owner, le_counted_lock_and_decide);
	plan = SPI_prepare("SELECT (SELECT pg_catalog.count(*) FROM leader_election.leases AS l"
					   "         WHERE l.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1),"
					   "       (SELECT pg_catalog.count(*) FROM leader_election.tasks AS t"
					   "         WHERE t.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1)",
					   1, argtypes);
	if (plan == NULL ||
		SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not count the lease names and tasks of role %u", roleid);
	names = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	ntasks = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 2, &isnull));
	le_owner_rights_end(&rights);
	SPI_finish();

	if (names > 0 || ntasks > 0)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("role \"%s\" cannot be dropped because it owns lease names or tasks",
						GetUserNameFromId(roleid, false)),
				 errdetail("Owned by the role in database \"%s\": lease names " INT64_FORMAT ", tasks " INT64_FORMAT ".",
						   get_database_name(MyDatabaseId), names, ntasks),
				 errhint("Hand the names to another role with leader_election.assign_name(), and unregister the tasks, first.")));
}

static void
le_object_access(ObjectAccessType access, Oid classId, Oid objectId,
				 int subId, void *arg)
{
	if (le_prev_object_access_hook != NULL)
		le_prev_object_access_hook(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == AuthIdRelationId)
		le_refuse_drop_of_owner(objectId);
}

/*
 * A new name or task is about to be owned by role: lock the role as
 * PostgreSQL does before recording an owner, so that a DROP ROLE in
 * progress (which locks the role, then counts its names and tasks here)
 * either finishes first, and this fails (42704), or waits for this
 * transaction, and then counts what it added.
 */
void
le_lock_new_owner(Oid role, bool is_caller)
{
	/* Taking the lock processes the invalidations of a DROP it waited for. */
	LockSharedObject(AuthIdRelationId, role, 0, AccessShareLock);
	if (SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		return;
	if (is_caller)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the calling role was dropped while this call waited for it")));
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("role with OID %u does not exist", role)));
}

/* Called once from _PG_init. */
void
le_role_guard_install(void)
{
	le_prev_object_access_hook = object_access_hook;
	object_access_hook = le_object_access;
}
