/*-------------------------------------------------------------------------
 *
 * owner_rights.c
 *	  Acting with the rights of the extension's tables' owner, for a caller
 *	  that may be hostile.
 *
 * Ordinary roles have no rights on the extension's tables; the extension
 * writes them for the caller as their owner (usually the superuser who
 * installed it), under the caller's transaction and in the caller's
 * session.  Whatever runs during such a write runs as the owner: the
 * extension's own code, and code an administrator added to the tables (a
 * trigger, rule, CHECK constraint, column default, domain, index
 * expression or operator class, forced row-level security policy).  That
 * added code must not become a way for the caller to run code of its own
 * as the owner, so:
 *
 * O1  Every statement or direct write made with the owner's rights runs
 *     between le_owner_rights_begin() (or _begin_statements()) and
 *     le_owner_rights_end(), as a
 *     security-restricted operation (as PostgreSQL runs a table owner's
 *     index expressions in VACUUM or CREATE INDEX): nothing that runs
 *     there can SET ROLE, create temporary objects, LISTEN or PREPARE in
 *     the caller's session.
 *
 * O2  It runs with search_path = pg_catalog, pg_temp (so a function,
 *     operator or table named without a schema is never found in a schema
 *     of the caller's choosing), and with standard_conforming_strings on (so
 *     SQL text that added code builds by doubling quotes means what its
 *     author saw), whenever added code could run in it: always
 *     for statements (le_owner_rights_begin_statements), which open and
 *     lock the tables only after this is decided, when DDL committed
 *     meanwhile (a trigger created while the caller held the tables' locks
 *     from earlier statements) takes effect; for direct writes
 *     (le_owner_rights_begin) while the tables, already locked for
 *     writing, carry added code (le_rel_runs_added_code).
 *
 * O3  While a table the call may touch carries added code, the call is
 *     refused with 42501, before anything runs as the owner, if the
 *     caller's session has temporary tables, views, sequences or types:
 *     pg_temp is searched for relations and types (never for functions or
 *     operators) even when listed last, so any of them could stand in for
 *     one the added code names without a schema.  For statements this is
 *     decided with the tables locked as the statements will lock them (a
 *     callback), so no DDL can commit between the decision and its use.
 *
 * Added code is recognised conservatively (le_rel_runs_added_code):
 * every trigger, rule, CHECK constraint, column default, index expression
 * or predicate the install script did not create (le_own_parts, with the
 * install's shape: le_expr_not_install_shaped), and anything else that
 * could run a function the extension did not write, one with an OID at or
 * above FirstNormalObjectId (everything initdb creates is below it).  Even
 * an expression of built-in functions only counts: some of them run SQL
 * text (query_to_xml), whose names the caller's search_path would resolve.
 * A false alarm costs only O2's and O3's restrictions, never a wrong
 * answer.
 *
 * This file decides nothing about leases; lease_store.c, task_registry.c
 * and role_guard.c decide when to act as the owner, and name_admin.c
 * applies O3 for the administrator's SECURITY DEFINER functions, which
 * carry O2's settings in their own definitions.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/amapi.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"

#include "leader_election.h"

/* The search_path of O2: the catalog, then the caller's temporary schema. */
#define LE_OWNER_SEARCH_PATH	"pg_catalog, pg_temp"

/*
 * What the install and update scripts attach to the extension's tables,
 * besides plain indexes of built-in operator classes and the lease cache's
 * triggers (lease_store.c): CHECK constraints, by name, and column
 * defaults, by column.  Anything else of that kind is added code.
 */
typedef struct LeOwnParts
{
	const char *table;			/* in schema leader_election */
	const char *checks[2];
	const char *defaults[3];
} LeOwnParts;

static const LeOwnParts le_own_parts[] = {
	{"history", {"history_end_reason"}, {NULL}},
	{"handovers", {"handovers_reason"}, {NULL}},
	{"task_runs", {"task_runs_status"}, {NULL}},
	{"tasks", {NULL}, {"enabled", "created_at"}},
};

/* Is name one of own (a NULL-terminated list of at most max)? */
static bool
le_is_own(const char *const *own, int max, const char *name)
{
	for (int i = 0; i < max && own[i] != NULL; i++)
		if (strcmp(own[i], name) == 0)
			return true;
	return false;
}

static const LeOwnParts *
le_own_parts_of(Relation rel)
{
	for (int i = 0; i < lengthof(le_own_parts); i++)
		if (strcmp(le_own_parts[i].table, RelationGetRelationName(rel)) == 0)
			return &le_own_parts[i];
	return NULL;
}

static bool
le_oid_is_added(Oid oid, void *context)
{
	return oid >= FirstNormalObjectId;
}

/*
 * Is this expression of the install scripts' shape: a column compared with
 * = to constants of built-in types (the CHECKs: end_reason = ANY
 * (ARRAY[...])), a constant or now() (the defaults)?  Such an expression
 * looks up no name and runs nothing of anyone's.  A constraint or default
 * that only has the install's name (an administrator re-created it) and
 * is of any other shape is added code, though every function it calls may
 * be built in: some resolve names through the search_path when they run
 * (pg_input_is_valid's type name, query_to_xml's SQL text), and a constant
 * of a type not built in runs that type's input function.
 */
static bool
le_expr_not_install_shaped(Node *node, void *context)
{
	if (node == NULL)
		return false;
	switch (nodeTag(node))
	{
		case T_List:
		case T_Var:
		case T_ArrayExpr:
		case T_BoolExpr:
		case T_NullTest:
		case T_RelabelType:
			break;
		case T_Const:
			if (le_oid_is_added(((Const *) node)->consttype, NULL))
				return true;
			break;
		case T_OpExpr:
			if (((OpExpr *) node)->opno != TextEqualOperator)
				return true;
			break;
		case T_ScalarArrayOpExpr:
			if (((ScalarArrayOpExpr *) node)->opno != TextEqualOperator)
				return true;
			break;
		case T_FuncExpr:
			if (((FuncExpr *) node)->funcid != F_NOW)
				return true;
			break;
		default:
			return true;
	}
	return expression_tree_walker(node, le_expr_not_install_shaped, context);
}

/* A CHECK or default of the install (by name) that kept its shape? */
static bool
le_stored_expr_is_own(const char *const *own, int max, const char *name,
					  const char *node_text)
{
	return le_is_own(own, max, name) && node_text != NULL &&
		!le_expr_not_install_shaped((Node *) stringToNode(node_text), NULL);
}

/*
 * Could maintaining this index run added code?  The install scripts
 * create indexes of plain columns only: any expression or predicate is
 * added, and so is an access method, operator family, operator class
 * function (an added operator class may sit in a built-in family) or
 * exclusion operator that is not built in.
 */
static bool
le_index_runs_added_code(Oid index_oid)
{
	Relation	idx = index_open(index_oid, AccessShareLock);
	int			nkeys = IndexRelationGetNumberOfKeyAttributes(idx);
	bool		added;

	added = le_oid_is_added(idx->rd_rel->relam, NULL) ||
		RelationGetIndexExpressions(idx) != NIL ||
		RelationGetIndexPredicate(idx) != NIL;
	for (int i = 0; !added && i < nkeys; i++)
	{
		added = le_oid_is_added(idx->rd_opfamily[i], NULL);
		for (int j = 0; !added && j < idx->rd_indam->amsupport; j++)
			added = le_oid_is_added(index_getprocid(idx, i + 1, j + 1), NULL);
	}
	if (!added && idx->rd_index->indisexclusion)
	{
		Oid		   *ops;
		Oid		   *procs;
		uint16	   *strategies;

		RelationGetExclusionInfo(idx, &ops, &procs, &strategies);
		for (int i = 0; !added && i < nkeys; i++)
			added = le_oid_is_added(ops[i], NULL) || le_oid_is_added(procs[i], NULL);
	}
	index_close(idx, AccessShareLock);
	return added;
}

/*
 * Does writing rel (INSERT, UPDATE or DELETE, through the executor or
 * direct_write.c) possibly run code the extension did not write?  Triggers
 * for which is_own_trigger (may be NULL) answers true are the extension's.
 * Decided from the relcache entry: every change of what is looked at here
 * invalidates it (callers recompute then).
 */
bool
le_rel_runs_added_code(Relation rel, bool (*is_own_trigger) (const Trigger *trigger))
{
	TupleDesc	desc = RelationGetDescr(rel);
	TupleConstr *constr = desc->constr;
	const LeOwnParts *own = le_own_parts_of(rel);
	const char *no_parts[1] = {NULL};
	const char *const *own_checks = own != NULL ? own->checks : no_parts;
	const char *const *own_defaults = own != NULL ? own->defaults : no_parts;
	int			max_checks = own != NULL ? lengthof(own->checks) : 1;
	int			max_defaults = own != NULL ? lengthof(own->defaults) : 1;
	List	   *indexes;
	ListCell   *lc;
	bool		added = false;

	if (rel->rd_rules != NULL ||
		(rel->rd_rel->relrowsecurity && rel->rd_rel->relforcerowsecurity) ||
		rel->rd_rel->relhassubclass || rel->rd_rel->relispartition ||
		le_oid_is_added(rel->rd_rel->relam, NULL))
		return true;
	if (rel->trigdesc != NULL)
		for (int i = 0; i < rel->trigdesc->numtriggers; i++)
			if (is_own_trigger == NULL || !is_own_trigger(&rel->trigdesc->triggers[i]))
				return true;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && le_oid_is_added(att->atttypid, NULL))
			return true;
	}
	if (constr != NULL)
	{
		for (int i = 0; i < constr->num_check; i++)
			if (!le_stored_expr_is_own(own_checks, max_checks, constr->check[i].ccname,
									   constr->check[i].ccbin))
				return true;
		for (int i = 0; i < constr->num_defval; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, constr->defval[i].adnum - 1);

			if (!le_stored_expr_is_own(own_defaults, max_defaults, NameStr(att->attname),
									   constr->defval[i].adbin))
				return true;
		}
	}
	indexes = RelationGetIndexList(rel);
	foreach(lc, indexes)
	{
		if (le_index_runs_added_code(lfirst_oid(lc)))
		{
			added = true;
			break;
		}
	}
	list_free(indexes);
	return added;
}

/*
 * Has this session a temporary relation or type, which pg_temp could
 * offer in place of one that added code names without a schema?  Every
 * such object depends on its schema in pg_depend (that is how a session's
 * end finds them), so one index scan answers.
 */
static bool
le_session_has_temp_relations_or_types(void)
{
	Oid			temp_nsp;
	Oid			temp_toast_nsp;
	Relation	depend;
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	GetTempNamespaceState(&temp_nsp, &temp_toast_nsp);
	if (!OidIsValid(temp_nsp))
		return false;
	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_refclassid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(NamespaceRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_refobjid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(temp_nsp));
	scan = systable_beginscan(depend, DependReferenceIndexId, true, NULL, 2, key);
	while (!found && HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tup);

		found = dep->classid == RelationRelationId || dep->classid == TypeRelationId;
	}
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	return found;
}

/* O3: refuse a session with temporary relations or types. */
static void
le_refuse_temp_objects(void)
{
	if (le_session_has_temp_relations_or_types())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("leader_election cannot write its tables for a session that has temporary tables or types"),
				 errdetail("An administrator added code to the extension's tables; it runs with the tables' owner's rights, and a temporary table or type could stand in for one it names."),
				 errhint("Drop them (DISCARD TEMP), or call from another session.")));
}

/* Become owner (O1), with the search_path of O2 if restrict_path. */
static void
le_owner_rights_enter(LeOwnerRights *rights, Oid owner, bool restrict_path)
{
	GetUserIdAndSecContext(&rights->save_userid, &rights->save_sec_context);
	rights->guc_nest_level = -1;
	SetUserIdAndSecContext(owner, rights->save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	if (restrict_path)
	{
		rights->guc_nest_level = NewGUCNestLevel();
		(void) set_config_option("search_path", LE_OWNER_SEARCH_PATH,
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
		(void) set_config_option("standard_conforming_strings", "on",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
	}
}

/*
 * Act as owner from here to le_owner_rights_end(), for writes made
 * without the executor on tables the caller has locked for writing and
 * decided added_code on after locking them (O1; O2 and O3 if added_code).
 * An error in between needs no le_owner_rights_end(): the
 * (sub)transaction's abort restores the user and the search_path.
 */
void
le_owner_rights_begin(LeOwnerRights *rights, Oid owner, bool added_code)
{
	if (added_code)
		le_refuse_temp_objects();
	le_owner_rights_enter(rights, owner, added_code);
}

/*
 * The same for statements, which lock the tables they touch themselves,
 * after this (O1, O2 always).  Only for a session that has temporary
 * objects (the only ones O3 can refuse), lock_and_decide locks every
 * table the statements may touch, in the modes they will, and says
 * whether any carries added code (O3).
 */
void
le_owner_rights_begin_statements(LeOwnerRights *rights, Oid owner,
								 bool (*lock_and_decide) (void))
{
	le_owner_rights_refuse_temp(lock_and_decide);
	le_owner_rights_enter(rights, owner, true);
}

/*
 * O3 alone, for the administrator's name functions, which act as their
 * owner through SECURITY DEFINER (with a fixed search_path and
 * standard_conforming_strings of their own) rather than through this file.
 */
void
le_owner_rights_refuse_temp(bool (*lock_and_decide) (void))
{
	if (le_session_has_temp_relations_or_types() && lock_and_decide())
		le_refuse_temp_objects();
}

void
le_owner_rights_end(LeOwnerRights *rights)
{
	if (rights->guc_nest_level >= 0)
		AtEOXact_GUC(true, rights->guc_nest_level);
	SetUserIdAndSecContext(rights->save_userid, rights->save_sec_context);
}
