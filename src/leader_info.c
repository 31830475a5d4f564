/*-------------------------------------------------------------------------
 *
 * leader_info.c
 *	  What a leader publishes about itself: set_leader_info() and the info
 *	  that current_leader() shows.
 *
 * The valid holder of a lease may publish one small JSON document (its
 * address, version, ...) that observers read with current_leader(), the
 * view leader_election.leaders and the NOTIFY event "info".  The document
 * belongs to the term it was set in (I11 in lease.c): it is stored with that
 * term and the term's start (lease_store.c, table
 * leader_election.leader_info) and shown only while the lease still has
 * that term and a holder, so any change of holder clears it without
 * anything written.
 *
 * Its text form may have at most LE_MAX_INFO_BYTES bytes (54000 beyond):
 * the NOTIFY payload that carries it must stay under NOTIFY's 8000 bytes,
 * and the document is read on every current_leader().  It must also convert
 * to UTF-8 (22023), as names and holders must (input.c says why).
 *
 * This file must never write a lease row: it only reads the lease to decide
 * whether the caller validly holds it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "leader_election.h"

PG_FUNCTION_INFO_V1(set_leader_info);

/*
 * The info published in the term `row` shows, as jsonb text, or NULL: none
 * when the lease has no holder (I11).
 */
char *
le_leader_info(const char *name, const LeaseRow *row)
{
	if (!row->found || row->holder == NULL)
		return NULL;
	return le_store_read_info(name, row->term, row->acquired_at);
}

/*
 * set_leader_info(name text, info jsonb, holder text) returns boolean
 *
 * True if the caller validly holds the lease and its info is now `info`
 * (NULL clears it); false, writing nothing, if the caller does not validly
 * hold it.  The holder waits for the name's writer lock, as its renewals
 * and its release do (I7).
 */
Datum
set_leader_info(PG_FUNCTION_ARGS)
{
	char	   *name = le_checked_name(fcinfo, 0);
	Jsonb	   *info = PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1);
	char	   *holder = le_checked_optional_holder(fcinfo, 2);
	char	   *text = NULL;
	LeIdentity	who;
	LeaseRow	row;
	TimestampTz now;

	if (info != NULL)
	{
		text = JsonbToCString(NULL, &info->root, VARSIZE(info));
		if (strlen(text) > LE_MAX_INFO_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("leader info is too large (%zu bytes; at most %d are allowed)",
							strlen(text), LE_MAX_INFO_BYTES),
					 errdetail("The size is that of the document's text form."),
					 errhint("Publish an address or a key; keep larger documents elsewhere.")));
		/* Readable by every monitoring client (input.c). */
		if (le_utf8_conversion_problem(text, strlen(text)) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("leader info must not contain characters that have no UTF-8 equivalent"),
					 errdetail("Monitoring reads leader info through UTF-8 clients.")));
	}
	PreventCommandDuringRecovery("set_leader_info()");
	PreventCommandIfReadOnly("set_leader_info()");
	who = le_resolve_identity(holder);

	/* Another role's name: 42501 before any lock (I8). */
	le_store_read_for_answer(name, &row);
	le_check_owner(name, &row);
	if (!le_holds_valid_lease(&row, &who, GetCurrentTimestamp()))
		PG_RETURN_BOOL(false);

	le_lock_name_writer(name);
	le_store_read(name, &row);
	now = GetCurrentTimestamp();
	if (!le_holds_valid_lease(&row, &who, now))
	{
		le_unlock_name_writer(name);
		PG_RETURN_BOOL(false);
	}
	le_store_set_info(name, row.term, row.acquired_at, PointerGetDatum(info),
					  info == NULL, now);
	le_notify(name, "info", who.holder, row.term, "none", text, NULL);
	/* Like every write under the writer lock: no PREPARE (wakeup.c). */
	le_xact_touched(name);
	PG_RETURN_BOOL(true);
}
