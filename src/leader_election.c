/*-------------------------------------------------------------------------
 *
 * leader_election.c
 *	  Module load: settings, shared memory, transaction callbacks and the
 *	  background worker registration.
 *
 * The SQL functions work whether or not the library is preloaded.  With
 * shared_preload_libraries = 'leader_election' the module also gets shared
 * memory (instant wakeups for wait_for_leadership, the lease cache that
 * answers am_leader without reading the table, and the queue from which a
 * notifier worker sends the NOTIFY of changes of leader, notify_queue.c)
 * and the task runner's launcher (task_launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "compat.h"
#include "leader_election.h"
#include "task_runner.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

char	   *le_holder_id_setting = NULL;
int			le_history_max_terms = 100;
int			le_max_names_per_role = 0;

#ifdef LE_HAVE_SHMEM_REQUEST_HOOK
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * Check hook work shared by leader_election.holder_id and
 * leader_election.task_holder_id: empty, or a holder an explicit holder
 * argument could be.
 */
bool
le_check_holder_setting(const char *value, const char *setting)
{
	const char *problem;

	if (value == NULL || value[0] == '\0')
		return true;			/* unset: the default identity */
	problem = le_label_problem(value, LE_MAX_HOLDER_BYTES);
	if (problem == NULL &&
		strncmp(value, LE_SESSION_PREFIX, strlen(LE_SESSION_PREFIX)) == 0)
		problem = "must not start with \"" LE_SESSION_PREFIX "\"";
	if (problem != NULL)
	{
		GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
		GUC_check_errmsg("%s %s", setting, problem);
		return false;
	}
	return true;
}

static bool
le_check_holder_id(char **newval, void **extra, GucSource source)
{
	return le_check_holder_setting(*newval, "leader_election.holder_id");
}

static const struct config_enum_entry le_notify_delivery_options[] = {
	{"background", LE_NOTIFY_BACKGROUND, false},
	{"in_transaction", LE_NOTIFY_IN_TRANSACTION, false},
	{NULL, 0, false}
};

static void
le_define_settings(void)
{
	DefineCustomEnumVariable("leader_election.notify_delivery",
							 "Who sends the NOTIFY of a change of leader made by this session.",
							 "background: a notifier worker, after the commit (needs preloading); "
							 "in_transaction: the changing transaction itself, at its commit, "
							 "which then serialises with every NOTIFY in the cluster.",
							 &le_notify_delivery,
							 LE_NOTIFY_BACKGROUND,
							 le_notify_delivery_options,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("leader_election.holder_id",
							   "Holder identity used when a function is called without one.",
							   "Empty means the calling session's own identity, which "
							   "ends with the session.",
							   &le_holder_id_setting,
							   "",
							   PGC_USERSET,
							   0,
							   le_check_holder_id, NULL, NULL);

	DefineCustomIntVariable("leader_election.history_max_terms",
							"Terms kept per lease name in leader_election.history.",
							"0 keeps no history.",
							&le_history_max_terms,
							100, 0, 1000000,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("leader_election.max_names_per_role",
							"Most lease names one role may create.",
							"0 means no limit.",
							&le_max_names_per_role,
							0, 0, INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);
}

static void
le_shmem_request(void)
{
#ifdef LE_HAVE_SHMEM_REQUEST_HOOK
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(le_wakeup_shmem_size());
	RequestAddinShmemSpace(le_cache_shmem_size());
	RequestAddinShmemSpace(le_waiters_shmem_size());
	RequestAddinShmemSpace(le_task_shmem_size());
	RequestAddinShmemSpace(le_notify_shmem_size());
	RequestAddinShmemSpace(le_listeners_shmem_size());
	RequestAddinShmemSpace(le_stats_shmem_size());
	RequestAddinShmemSpace(le_insert_hints_shmem_size());
}

static void
le_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	le_wakeup_shmem_init();
	le_cache_shmem_init();
	le_waiters_shmem_init();
	le_task_shmem_init();
	le_notify_shmem_init();
	le_listeners_shmem_init();
	le_stats_shmem_init();
	le_insert_hints_shmem_init();
}

void
_PG_init(void)
{
	le_define_settings();

	/*
	 * The task runner's settings are postmaster-level, which may only be
	 * created while preloading; without preloading there is no task runner.
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		le_task_define_settings();
		le_task_runner_register();
#ifdef LE_HAVE_SHMEM_REQUEST_HOOK
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = le_shmem_request;
#else
		le_shmem_request();
#endif
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = le_shmem_startup;
		le_catalog_watch_install();
		le_listeners_install();
	}

	le_reserve_guc_prefix("leader_election");
	le_wakeup_register_callbacks();
	le_cache_register_callbacks();
	le_commit_register_callbacks();
	le_terms_register_callbacks();
	le_notify_register_callbacks();
	le_stats_register_callbacks();
	le_role_guard_install();
}
