# LePatroni.pm: an etcd + Patroni cluster of PostgreSQL nodes on 127.0.0.1
# for test/t/400_patroni.pl, and the failover faults injected into it
# (issue 14; facts about Patroni 3.0 and etcd 3.4 on Debian 12 in
# docs/HA-NOTES.md).
#
# One etcd member and N Patroni agents, each managing a PostgreSQL node that
# preloads leader_election (through Patroni's postgresql.parameters), all run
# by this process (the test runs as the unprivileged test user) and recorded
# by pid: the agent's own pid, not a wrapper's, so SIGSTOP reaches it.
# Their stdin is /dev/null: Patroni's crash recovery of a former primary
# runs `postgres --single`, which inherits it and would otherwise wait at
# its prompt forever, holding the shared memory the restart needs.
#
# Faults (each returns a record for the nemesis log: kind, start and heal
# times on CLOCK_MONOTONIC, the primary before and after):
#   switchover  patronictl switchover to a replica (in synchronous mode, to
#               the synchronous standby)
#   kill9       SIGKILL of the primary's postmaster; its agent restarts it
#               (crash recovery) or another node takes over
#   nodeloss    SIGKILL of the primary's agent and postmaster: a failover
#               after the DCS ttl; then the agent is started again and the
#               old primary rejoins (pg_rewind)
#   splitbrain  SIGSTOP of the primary's agent: after the ttl a standby is
#               promoted while the old primary still serves its sessions;
#               then SIGCONT, and the agent demotes and rewinds it
#   etcd        etcd stopped (SIGTERM) and started again
# A fault has healed when exactly one node is a writable primary, every
# other node streams from it (in synchronous mode, one synchronously), and
# the multi-host connection string reaches the primary.
#
# Every wait has a deadline; timings are generous for a busy 2-core machine.
package LePatroni;

use strict;
use warnings;

use File::Path qw(make_path);
use HTTP::Tiny;
use IPC::Run;
use JSON::PP;
use MIME::Base64 qw(encode_base64 decode_base64);
use PostgreSQL::Test::Cluster;
use Time::HiRes qw(time usleep clock_gettime CLOCK_MONOTONIC);

our @FAULTS = qw(switchover kill9 nodeloss splitbrain etcd);

sub mono_ns { return int(clock_gettime(CLOCK_MONOTONIC) * 1e9); }

# Ports: LE_PATRONI_PG_PORT, LE_PATRONI_REST_PORT (first of N consecutive
# ports) and LE_PATRONI_ETCD_PORTS ("client,peer"), else free ports.
sub _ports
{
	my ($env, $n) = @_;
	return map { $ENV{$env} + $_ } 0 .. $n - 1 if $ENV{$env};
	return map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. $n;
}

# new(dir => DIR, bin => PG bin dir, nodes => 3, log => sub { diag })
sub new
{
	my ($class, %o) = @_;
	my $n = $o{nodes} // 3;
	my @pg = _ports('LE_PATRONI_PG_PORT', $n);
	my @rest = _ports('LE_PATRONI_REST_PORT', $n);
	my @etcd = $ENV{LE_PATRONI_ETCD_PORTS}
	  ? split(/,/, $ENV{LE_PATRONI_ETCD_PORTS})
	  : _ports('', 2);
	my $self = bless {
		dir   => $o{dir},
		bin   => $o{bin},
		log   => $o{log} || sub { },
		# A scope of its own: an etcd left over from another run cannot
		# pass for this cluster's.
		scope => $o{scope} // "le_ha_$$",
		etcd_port => $etcd[0],
		etcd_peer => $etcd[1],
		nodes => [
			map {
				{
					name => "n" . ($_ + 1),
					pg_port => $pg[$_],
					rest_port => $rest[$_],
					dir => "$o{dir}/n" . ($_ + 1),
				}
			} 0 .. $n - 1
		],
		http => HTTP::Tiny->new(timeout => 3),
	}, $class;
	return $self;
}

sub nodes { return @{ $_[0]{nodes} }; }
sub node { my ($self, $name) = @_; return (grep { $_->{name} eq $name } $self->nodes)[0]; }

# The multi-host connection string, nodes in the given order (default: all
# in order), that only a writable primary accepts.
sub connstr
{
	my ($self, @order) = @_;
	@order = map { $_->{name} } $self->nodes unless @order;
	my @n = map { $self->node($_) } @order;
	return 'host=' . join(',', map { '127.0.0.1' } @n)
	  . ' port=' . join(',', map { $_->{pg_port} } @n)
	  . ' dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=5';
}

# ---- etcd ----

sub start_etcd
{
	my ($self) = @_;
	my ($c, $p) = ($self->{etcd_port}, $self->{etcd_peer});
	make_path("$self->{dir}/etcd");
	$self->{etcd} = IPC::Run::start(
		[
			'etcd', '--name', 'e1', '--data-dir', "$self->{dir}/etcd/data",
			'--listen-client-urls', "http://127.0.0.1:$c",
			'--advertise-client-urls', "http://127.0.0.1:$c",
			'--listen-peer-urls', "http://127.0.0.1:$p",
			'--initial-advertise-peer-urls', "http://127.0.0.1:$p",
			'--initial-cluster', "e1=http://127.0.0.1:$p"
		],
		'<', '/dev/null', '>>', "$self->{dir}/etcd/etcd.log", '2>>', "$self->{dir}/etcd/etcd.log");
	_until(sub {
			my $r = $self->{http}->get("http://127.0.0.1:$c/health");
			$r->{success} && $r->{content} =~ /"health":\s*"true"/;
		}, 60) or die "etcd did not become healthy (see $self->{dir}/etcd/etcd.log)";
	return;
}

sub stop_etcd
{
	my ($self) = @_;
	return unless $self->{etcd};
	$self->{etcd}->signal('TERM');
	_finish($self->{etcd}, 30);
	delete $self->{etcd};
	return;
}

# One key of this cluster's scope in etcd (v3 JSON gateway): the decoded
# value, or undef if absent or etcd does not answer.
sub dcs_get
{
	my ($self, $key) = @_;
	my $r = $self->{http}->post("http://127.0.0.1:$self->{etcd_port}/v3/kv/range",
		{ content => encode_json({ key => encode_base64("/service/$self->{scope}/$key", '') }) });
	return undef unless $r->{success};
	my $kv = eval { decode_json($r->{content})->{kvs} } or return undef;
	return @$kv ? decode_base64($kv->[0]{value}) : undef;
}

sub dcs_delete
{
	my ($self, $key) = @_;
	my $r = $self->{http}->post("http://127.0.0.1:$self->{etcd_port}/v3/kv/deleterange",
		{ content => encode_json({ key => encode_base64("/service/$self->{scope}/$key", '') }) });
	return $r->{success};
}

# Wait (up to $seconds) until Patroni's DCS names a synchronous standby.
# Patroni 3.0 can leave its /sync key naming a former leader (seen when an
# old primary won its leader key back after a split brain): the leader then
# never records a synchronous standby, and refuses every switchover and
# failover in synchronous mode.  After 20 s of that the harness deletes the
# stale key, as an operator would, and the leader writes a fresh one within
# a loop; such repairs are counted in {sync_key_resets}.
sub wait_sync_standby
{
	my ($self, $seconds) = @_;
	my $listed = sub {
		my $m = $self->members;
		grep { ($m->{$_}{role} // '') eq 'sync_standby' } keys %$m;
	};
	return 1 if _until($listed, 20);
	my $leader = $self->leader;
	my $sync = eval { decode_json($self->dcs_get('sync') // '{}') } // {};
	if ($leader && defined $sync->{leader} && $sync->{leader} ne $leader->{name})
	{
		$self->{log}->("Patroni's /sync key names $sync->{leader}, the leader is $leader->{name}: key deleted");
		$self->{sync_key_resets}++;
		$self->dcs_delete('sync');
	}
	return _until($listed, $seconds - 20);
}

# ---- Patroni agents ----

sub _write_config
{
	my ($self, $nd) = @_;
	make_path("$nd->{dir}/log");
	my $cfg = <<"EOF";
scope: $self->{scope}
name: $nd->{name}
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:$nd->{rest_port}
  connect_address: 127.0.0.1:$nd->{rest_port}
etcd3:
  hosts: 127.0.0.1:$self->{etcd_port}
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 2
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    synchronous_mode: false
    postgresql:
      use_pg_rewind: true
      parameters:
        shared_preload_libraries: leader_election
        wal_log_hints: "on"
        max_connections: 60
        max_wal_senders: 10
        leader_election.history_max_terms: 1000000
        leader_election.allow_superuser_tasks: "on"
  initdb:
  - encoding: UTF8
  - auth: trust
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$nd->{pg_port}
  connect_address: 127.0.0.1:$nd->{pg_port}
  data_dir: $nd->{dir}/data
  bin_dir: $self->{bin}
  pgpass: $nd->{dir}/pgpass
  use_pg_rewind: true
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $nd->{dir}
    fsync: "off"
    logging_collector: "on"
    log_directory: $nd->{dir}/log
    log_filename: postgresql.log
    log_min_messages: warning
    log_line_prefix: "%m [%p] "
EOF
	open my $fh, '>', "$nd->{dir}/patroni.yml" or die $!;
	print $fh $cfg;
	close $fh;
	return "$nd->{dir}/patroni.yml";
}

sub start_agent
{
	my ($self, $nd) = @_;
	my $cfg = $self->_write_config($nd);
	$nd->{agent} = IPC::Run::start([ 'patroni', $cfg ],
		'<', '/dev/null', '>>', "$nd->{dir}/patroni.log", '2>>', "$nd->{dir}/patroni.log");
	$nd->{agent_pid} = $nd->{agent}{KIDS}[0]{PID};
	return;
}

sub kill_agent
{
	my ($self, $nd, $sig) = @_;
	return unless $nd->{agent};
	kill 'CONT', $nd->{agent_pid};
	kill $sig // 'KILL', $nd->{agent_pid};
	_finish($nd->{agent}, 30);
	delete $nd->{agent};
	return;
}

sub postmaster_pid
{
	my ($self, $nd) = @_;
	open my $fh, '<', "$nd->{dir}/data/postmaster.pid" or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return $pid;
}

# The cluster as the first answering agent (not frozen) sees it:
# { name => { role, state } }.
sub members
{
	my ($self) = @_;
	for my $nd ($self->nodes)
	{
		next if !$nd->{agent} || $nd->{frozen};
		my $r = $self->{http}->get("http://127.0.0.1:$nd->{rest_port}/cluster");
		next unless $r->{success};
		my $c = eval { decode_json($r->{content}) } or next;
		return { map { $_->{name} => $_ } @{ $c->{members} || [] } };
	}
	return {};
}

# The node whose agent holds the leader key, or undef.
sub leader
{
	my ($self) = @_;
	my $m = $self->members;
	my ($l) = grep { $m->{$_}{role} && $m->{$_}{role} =~ /^(leader|master|primary)$/ } keys %$m;
	return $l ? $self->node($l) : undef;
}

# One query on one node (or a connection string); undef on any error.
sub sql
{
	my ($self, $target, $query, $timeout) = @_;
	my $conn = ref $target
	  ? "host=127.0.0.1 port=$target->{pg_port} dbname=postgres user=postgres connect_timeout=3"
	  : $target;
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run(
			[ "$self->{bin}/psql", '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conn, '-c', $query ],
			'<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout($timeout // 30));
	};
	return undef unless $ok;
	chomp $out;
	return $out;
}

# Healthy: one writable primary (checked on every node directly, so an old
# primary that still serves counts), the others running replicas, one of
# them the synchronous standby if $sync, and the multi-host string works.
sub healthy
{
	my ($self, $sync) = @_;
	my $m = $self->members;
	return 0 unless keys %$m == $self->nodes;
	for my $name (keys %$m)
	{
		return 0 unless ($m->{$name}{state} // '') =~ /^(running|streaming)$/;
	}
	# (Synchronous standbys: from pg_stat_replication below, not from the
	# agents' view, which lags when an old primary wins its key back.)
	my $leader = $self->leader or return 0;
	my @rw = grep { ($self->sql($_, 'SELECT pg_is_in_recovery()', 10) // '') eq 'f' } $self->nodes;
	return 0 unless @rw == 1 && $rw[0] == $leader;
	# Patroni 3.0 calls a replica "running" before it streams: ask the
	# primary.  Every other node streams from it (one synchronously, in
	# synchronous mode).
	my $streaming = $self->sql($leader,
		q{SELECT count(*) || ' ' || count(*) FILTER (WHERE sync_state = 'sync')
		    FROM pg_stat_replication WHERE state = 'streaming'}, 10) // '';
	my ($n, $nsync) = split / /, $streaming;
	return 0 unless defined $nsync && $n == $self->nodes - 1 && (!$sync || $nsync >= 1);
	return 0 unless defined $self->sql($self->connstr, 'SELECT 1', 20);
	return 1;
}

# Replicas that do not stream from the leader (by Patroni member name).
sub not_streaming
{
	my ($self) = @_;
	my $leader = $self->leader or return ();
	my $names = $self->sql($leader,
		q{SELECT string_agg(application_name, ',') FROM pg_stat_replication WHERE state = 'streaming'}, 10);
	return () unless defined $names;
	my %s = map { $_ => 1 } split /,/, $names;
	return grep { $_ ne $leader->{name} && !$s{$_} } map { $_->{name} } $self->nodes;
}

# Wait until healthy.  A replica that still does not stream after 60 s is
# re-initialised (patronictl reinit: a new base backup), as an operator
# would: Patroni 3.0 leaves a replica that followed a timeline the cluster
# then abandoned (an old primary that won its leader key back after a
# split brain) waiting forever.  Such reinits are counted in {reinits}.
sub wait_healthy
{
	my ($self, $sync, $seconds) = @_;
	my $t0 = time();
	my %done;
	return _until(
		sub {
			return 1 if $self->healthy($sync);
			if (time() - $t0 > 60)
			{
				for my $name ($self->not_streaming)
				{
					next if $done{$name}++;
					$self->{log}->("replica $name does not stream after 60 s: patronictl reinit $name");
					$self->{reinits}++;
					eval { $self->patronictl('reinit', $self->{scope}, $name, '--force'); 1 }
					  or $self->{log}->("reinit $name: $@");
				}
			}
			return 0;
		},
		$seconds // 300);
}

# Start etcd and the agents (the first bootstraps); wait for all to run.
sub start
{
	my ($self) = @_;
	$self->start_etcd;
	my ($first, @rest) = $self->nodes;
	$self->start_agent($first);
	_until(sub { my $l = $self->leader; $l && $l == $first }, 180)
	  or die "the first node did not bootstrap (see $first->{dir}/patroni.log)";
	$self->start_agent($_) for @rest;
	$self->wait_healthy(0) or die 'the cluster did not reach one primary and running replicas';
	return;
}

sub stop
{
	my ($self) = @_;
	for my $nd ($self->nodes)
	{
		next unless $nd->{agent};
		kill 'CONT', $nd->{agent_pid};
		$nd->{agent}->signal('TERM');
	}
	for my $nd ($self->nodes)
	{
		next unless $nd->{agent};
		# An agent may hang in its own shutdown (a primary in strict
		# synchronous mode without standbys): 60 s, then SIGKILL.
		_finish($nd->{agent}, 60);
		delete $nd->{agent};
	}
	# Whatever an agent left behind.
	for my $nd ($self->nodes)
	{
		system("$self->{bin}/pg_ctl", '-D', "$nd->{dir}/data", '-m', 'immediate', 'stop')
		  if -e "$nd->{dir}/data/postmaster.pid";
	}
	$self->stop_etcd;
	return;
}

sub patronictl
{
	my ($self, @args) = @_;
	my $cfg = "$self->{nodes}[0]{dir}/patroni.yml";
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ 'patronictl', '-c', $cfg, @args ], '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(120));
	};
	die "patronictl @args failed: $out $err" unless $ok;
	return $out;
}

# Synchronous mode on (strict) or off, through the DCS configuration.
sub set_sync
{
	my ($self, $on) = @_;
	my $v = $on ? 'true' : 'false';
	$self->patronictl('edit-config', '--force', '-q', '-s', "synchronous_mode=$v",
		'-s', "synchronous_mode_strict=$v");
	$self->wait_healthy($on) or die "the cluster did not settle with synchronous_mode=$v";
	# Patroni promotes (and switches over to) only the standby its DCS
	# lists as synchronous: wait until it does, not only PostgreSQL.
	!$on || $self->wait_sync_standby(120) or die 'Patroni never listed a synchronous standby';
	return;
}

# ---- faults ----

# fault(kind, sync): inject one fault and wait until it has healed.
sub fault
{
	my ($self, $kind, $sync) = @_;
	my $old = $self->leader or die 'no leader before the fault';
	my %f = (kind => $kind, old => $old->{name}, start => mono_ns(), start_epoch => time());
	if ($kind eq 'switchover')
	{
		# In synchronous mode only the synchronous standby may take over.
		# Patroni refuses a candidate its DCS does not list as synchronous
		# yet (patronictl still exits 0): try again until the primary moved.
		$f{start} = mono_ns();
		for my $try (1 .. 5)
		{
			$self->wait_sync_standby(60) if $sync;
			my $cand;
			_until(sub {
					if (!$sync)
					{
						($cand) = sort grep { $_ ne $old->{name} } map { $_->{name} } $self->nodes;
						return defined $cand;
					}
					# Patroni checks the candidate against its DCS: the
					# standby it lists as synchronous, else the primary's.
					my $m = $self->members;
					($cand) = grep { ($m->{$_}{role} // '') eq 'sync_standby' } sort keys %$m;
					($cand) = grep { $_ } split /,/, ($self->sql($old,
						q{SELECT string_agg(application_name, ',') FROM pg_stat_replication WHERE sync_state = 'sync'}, 10) // '')
					  unless defined $cand;
					defined $cand;
				}, 60) or die 'no synchronous standby to switch over to';
			eval { $self->patronictl('switchover', '--leader', $old->{name}, '--candidate', $cand, '--force'); 1 }
			  or $self->{log}->("switchover to $cand: $@");
			last if _until(sub { my $l = $self->leader; $l && $l != $old }, 30);
			$self->{log}->("switchover to $cand did not happen, again");
		}
	}
	elsif ($kind eq 'kill9')
	{
		my $pid = $self->postmaster_pid($old) or die 'no postmaster pid';
		$f{start} = mono_ns();
		kill 'KILL', $pid;
	}
	elsif ($kind eq 'nodeloss')
	{
		my $pid = $self->postmaster_pid($old) or die 'no postmaster pid';
		$f{start} = mono_ns();
		$self->kill_agent($old, 'KILL');
		kill 'KILL', $pid;
		# (Strict mode: Patroni promotes nobody unless its DCS names a
		# synchronous standby; then the node's return ends the outage.)
		my $ok = _until(sub { my $l = $self->leader; $l && $l != $old }, 90);
		$f{promoted} = mono_ns() if $ok;
		$self->{log}->("nodeloss: Patroni promoted no standby within 90 s") unless $ok;
		$self->start_agent($old);
	}
	elsif ($kind eq 'splitbrain')
	{
		$f{start} = mono_ns();
		kill 'STOP', $old->{agent_pid};
		$old->{frozen} = 1;
		# Patroni may also decline to promote anyone: in strict synchronous
		# mode when its DCS names no synchronous standby it can trust (the
		# agent froze before recording one).  Then the old primary stays the
		# only one, its commits wait, and this fault is a pause, not a split
		# brain.
		my $ok = _until(sub {
				my $l = $self->leader;
				$l && $l != $old
				  && ($self->sql($l, 'SELECT pg_is_in_recovery()', 10) // '') eq 'f';
			}, 90);
		$f{promoted} = mono_ns() if $ok;
		$self->{log}->("splitbrain: Patroni promoted no standby within 90 s") unless $ok;
		# Both serve now: the old primary's sessions go on (asynchronous
		# mode) or hang in their commits (synchronous mode).
		$f{old_still_serving} = ($self->sql($old, 'SELECT pg_is_in_recovery()', 10) // '') eq 'f' ? 1 : 0
		  if $ok;
		usleep(4_000_000);
		kill 'CONT', $old->{agent_pid};
		delete $old->{frozen};
	}
	elsif ($kind eq 'etcd')
	{
		$f{start} = mono_ns();
		$self->stop_etcd;
		usleep(2_000_000);
		$self->start_etcd;
	}
	else { die "unknown fault $kind"; }
	$self->wait_healthy($sync) or die "the cluster did not heal after $kind";
	$f{heal} = mono_ns();
	# Patroni must record the synchronous standby in its DCS too (it
	# promotes nobody else in strict mode).
	$self->wait_sync_standby(60) or $self->{log}->("$kind: Patroni lists no synchronous standby")
	  if $sync;
	$f{heal_epoch} = time();
	$f{new} = $self->leader->{name};
	$self->{log}->(sprintf('fault %s: primary %s -> %s, healed after %.1f s%s',
			$kind, $f{old}, $f{new}, ($f{heal} - $f{start}) / 1e9,
			defined $f{promoted} ? sprintf(' (promoted after %.1f s%s)', ($f{promoted} - $f{start}) / 1e9,
				defined $f{old_still_serving} ? ", old primary still writable: $f{old_still_serving}" : '') : ''));
	return \%f;
}

# The nemesis log line of a fault record (test/stress/LeStressCheck.pm).
sub nemesis_line
{
	my ($f) = @_;
	return "$f->{kind} $f->{start} $f->{heal} primary $f->{old} -> $f->{new}\n";
}

# Reap a process started with IPC::Run, SIGKILLing it after $seconds.
sub _finish
{
	my ($h, $seconds) = @_;
	my $ok = eval {
		local $SIG{ALRM} = sub { die "timeout\n" };
		alarm $seconds;
		$h->finish;
		alarm 0;
		1;
	};
	alarm 0;
	eval { $h->kill_kill; 1 } unless $ok;
	return;
}

sub _until
{
	my ($code, $seconds) = @_;
	my $deadline = time() + $seconds;
	while (1)
	{
		return 1 if $code->();
		return 0 if time() > $deadline;
		usleep(250_000);
	}
}

1;
