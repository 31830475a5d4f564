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
#include "access/relation.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "leader_election.h"

static object_access_hook_type le_prev_object_access_hook = NULL;

/*
 * Owner of relation relid, and whether reading it could run code an
 * administrator added (owner_rights.c); InvalidOid if there is no such
 * relation.
 */
static Oid
le_relation_owner(Oid relid, bool (*is_own_trigger) (const Trigger *trigger),
				  bool *added_code)
{
	Relation	rel = try_relation_open(relid, AccessShareLock);
	Oid			owner;

	if (rel == NULL)
		return InvalidOid;
	owner = rel->rd_rel->relowner;
	*added_code |= le_rel_runs_added_code(rel, is_own_trigger);
	relation_close(rel, NoLock);
	return owner;
}

static void
le_refuse_drop_of_owner(Oid roleid)
{
	Oid			nsp = get_namespace_oid("leader_election", true);
	Oid			leases;
	Oid			tasks;
	Oid			table_owner;
	bool		added_code = false;
	LeOwnerRights rights;
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
	table_owner = le_relation_owner(leases, le_store_is_own_trigger, &added_code);
	if (!OidIsValid(table_owner) ||
		!OidIsValid(le_relation_owner(tasks, NULL, &added_code)))
		return;

	args[0] = ObjectIdGetDatum(roleid);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	le_owner_rights_begin(&rights, table_owner, added_code);
	if (SPI_execute_with_args("SELECT (SELECT pg_catalog.count(*) FROM leader_election.leases AS l"
							  "         WHERE l.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1),"
							  "       (SELECT pg_catalog.count(*) FROM leader_election.tasks AS t"
							  "         WHERE t.owner::pg_catalog.oid OPERATOR(pg_catalog.=) $1)",
							  1, argtypes, args, NULL, false, 1) != SPI_OK_SELECT ||
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

/* Called once from _PG_init. */
void
le_role_guard_install(void)
{
	le_prev_object_access_hook = object_access_hook;
	object_access_hook = le_object_access;
}
