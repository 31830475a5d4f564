/*-------------------------------------------------------------------------
 *
 * catalog_watch.c
 *	  DDL that could let leader_election.leases change behind the lease
 *	  cache's back: every such statement empties the cache when its
 *	  transaction ends.
 *
 * The lease cache (lease_cache.c) learns of changes to the table from the
 * extension's own writes and from its ENABLE ALWAYS triggers.  Only DDL can
 * take those triggers out of the way (DISABLE TRIGGER, as pg_restore
 * --disable-triggers does; ENABLE [REPLICA] TRIGGER, which stops them under
 * session_replication_role = replica; DROP TRIGGER; replacing or dropping
 * the trigger function) or change rows without DML (ALTER TABLE ... TYPE
 * ... USING).  So each of these, in any backend, is a foreign change of the
 * table: the cache is emptied when its transaction commits or aborts, and
 * the table's relcache entry is invalidated, so every backend checks the
 * triggers again before it next uses the cache.  A later backend therefore
 * never finds entries from before a change it could not see.
 *
 * A database dropped and created again may get the same OID and, copied
 * from the same template, the same relation OIDs: the cache, keyed by
 * (database, relation, name), would mistake the old database's entries for
 * the new one's.  CREATE DATABASE and DROP DATABASE empty the cache at once.
 * For the same reason DROP DATABASE tells stats.c, which frees the dropped
 * database's counters when (and only if) the drop commits.
 *
 * The hook is PostgreSQL's object access hook, installed with the cache
 * (shared_preload_libraries); it runs in the backend doing the DDL.  DDL on
 * a trigger of leader_election.leases, or on any function of the
 * extension's schema, counts (emptying the cache costs only refills, but
 * triggers on other tables, which any role can create, do not).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "catalog/namespace.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"

#include "leader_election.h"

static object_access_hook_type le_prev_object_access_hook = NULL;

/* A change of the table by another route: forget the cache at xact end. */
static void
le_catalog_watch_foreign(void)
{
	Oid			leases = le_store_leases_relid();

	le_cache_note_foreign_change();
	if (OidIsValid(leases))
		CacheInvalidateRelcacheByRelid(leases);
}

/*
 * Is trigger trigger_oid on leader_election.leases?  True as well when the
 * trigger cannot be found (not yet visible): better to empty the cache once
 * too often.
 */
static bool
le_catalog_watch_trigger_on_leases(Oid trigger_oid)
{
	Oid			leases = le_store_leases_relid();
	Relation	tgrel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		on_leases = true;

	if (!OidIsValid(leases))
		return false;
	tgrel = table_open(TriggerRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(trigger_oid));
	scan = systable_beginscan(tgrel, TriggerOidIndexId, true, NULL, 1, &key);
	if (HeapTupleIsValid(tup = systable_getnext(scan)))
		on_leases = ((Form_pg_trigger) GETSTRUCT(tup))->tgrelid == leases;
	systable_endscan(scan);
	table_close(tgrel, AccessShareLock);
	return on_leases;
}

static void
le_catalog_watch(ObjectAccessType access, Oid classId, Oid objectId,
				 int subId, void *arg)
{
	if (le_prev_object_access_hook)
		le_prev_object_access_hook(access, classId, objectId, subId, arg);

	if (access != OAT_POST_CREATE && access != OAT_POST_ALTER &&
		access != OAT_DROP && access != OAT_TRUNCATE)
		return;

	switch (classId)
	{
		case DatabaseRelationId:
			if (access == OAT_POST_CREATE || access == OAT_DROP)
			{
				le_cache_forget_all();
				le_cache_note_foreign_change();
			}
			if (access == OAT_DROP)
				le_stats_forget_database(objectId);
			break;
		case TriggerRelationId:
			if (le_catalog_watch_trigger_on_leases(objectId))
				le_catalog_watch_foreign();
			break;
		case ProcedureRelationId:
			{
				Oid			nsp = get_func_namespace(objectId);

				if (!OidIsValid(nsp) ||
					nsp == get_namespace_oid("leader_election", true))
					le_catalog_watch_foreign();
			}
			break;
		case RelationRelationId:
			if (OidIsValid(objectId) && objectId == le_store_leases_relid())
				le_catalog_watch_foreign();
			break;
		default:
			break;
	}
}

/* _PG_init, while preloading (the cache exists only then). */
void
le_catalog_watch_install(void)
{
	le_prev_object_access_hook = object_access_hook;
	object_access_hook = le_catalog_watch;
}
