/*-------------------------------------------------------------------------
 *
 * input.c
 *	  Validation of every value a caller hands to leader_election.
 *
 * Each check raises a clear error with its SQLSTATE before anything is
 * locked, read or written, so bad input never changes anything:
 *	  NULL where a value is required          22004
 *	  empty, over-long, control characters    22023
 *	  interval with months, out of bounds     22023
 *
 * Names and holders are compared byte-wise everywhere (COLLATE "C"), so no
 * normalisation happens here: 'Job', 'job' and the NFC and NFD spellings of
 * a name are four different leases.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "leader_election.h"

/*
 * Reject control characters: C0 (0x01-0x1F), DEL (0x7F) and, since the
 * text is UTF-8 or another server encoding, the C1 range U+0080-U+009F as
 * UTF-8 encodes it (0xC2 0x80-0x9F).  They would let a name forge lines in
 * the server log or hide in monitoring output.
 */
static bool
le_has_control_characters(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 || c == 0x7F)
			return true;
		if (c == 0xC2 && i + 1 < len &&
			(unsigned char) s[i + 1] >= 0x80 && (unsigned char) s[i + 1] <= 0x9F &&
			GetDatabaseEncoding() == PG_UTF8)
			return true;
	}
	return false;
}

/*
 * What is wrong with a name or holder, or NULL if nothing is.  Shared by the
 * argument checks and the leader_election.holder_id check hook.
 */
const char *
le_label_problem(const char *s, int max_bytes)
{
	size_t		len = strlen(s);

	if (len == 0)
		return "must not be empty";
	if (len > (size_t) max_bytes)
		return psprintf("is too long (%zu bytes; at most %d are allowed)",
						len, max_bytes);
	if (le_has_control_characters(s, len))
		return "must not contain control characters";
	return NULL;
}

static void
le_check_label(const char *s, const char *what, int max_bytes)
{
	const char *problem = le_label_problem(s, max_bytes);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s %s", what, problem)));
}

/* The election name in argument argno: required, 1-255 bytes, printable. */
char *
le_checked_name(FunctionCallInfo fcinfo, int argno)
{
	char	   *name;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("lease name must not be null")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	le_check_label(name, "lease name", LE_MAX_NAME_BYTES);
	return name;
}

/*
 * A holder given explicitly (argument or setting).  It names a holder that
 * outlives sessions, so it may not pose as a session identity.
 */
void
le_check_holder_text(const char *holder, const char *what)
{
	le_check_label(holder, what, LE_MAX_HOLDER_BYTES);
	if (strncmp(holder, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not start with \"%s\"", what, LE_SESSION_PREFIX),
				 errdetail("That prefix is reserved for session identities."),
				 errhint("Omit the holder to hold the lease under this session's identity.")));
}

/* The optional holder in argument argno; NULL means "not given". */
char *
le_checked_optional_holder(FunctionCallInfo fcinfo, int argno)
{
	char	   *holder;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	holder = text_to_cstring(PG_GETARG_TEXT_PP(argno));
	le_check_holder_text(holder, "holder");
	return holder;
}

/*
 * An interval argument as microseconds.  Months and years have no fixed
 * length and are refused; a day counts as exactly 24 hours, whatever the
 * time zone does that day.
 */
int64
le_checked_interval(FunctionCallInfo fcinfo, int argno, const char *what,
					int64 min_usecs, int64 max_usecs, const char *bounds)
{
	Interval   *iv;
	int64		usecs;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
	iv = PG_GETARG_INTERVAL_P(argno);
	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not contain months or years", what),
				 errdetail("A month has no fixed length."),
				 errhint("Use days, hours, minutes or seconds.")));

	/* Days are bounded well below overflow by the maximum checked below. */
	if (iv->day > 1000000 || iv->day < -1000000 ||
		pg_add_s64_overflow(iv->time, (int64) iv->day * USECS_PER_DAY, &usecs) ||
		usecs < min_usecs || usecs > max_usecs)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %s", what, bounds),
				 min_usecs > 0 ?
				 errhint("Shorter leases would make leadership flap; longer ones would block a name for days after its holder vanished.") : 0));
	return usecs;
}
