# LeNemesis.pm: the fault injector of the leader_election stress test
# (research/anchors-reliability.md §B.4), driven by test/t/200_stress_history.pl.
#
# Seeded (same seed, same choice of faults, victims and pause lengths) and
# bounded in count and time.  Kinds:
#   terminate  pg_terminate_backend() of the lease holder's backend
#   pause      SIGSTOP the holder's client process for 1.5-3 x ttl, SIGCONT
#   crash      SIGKILL a random client backend: the postmaster kills every
#              session and reinitialises (needs restart_after_crash = on)
#   restart    immediate stop of the server, then start
#   timeouts   SIGUSR1 to 1-3 random clients: le_stress runs their
#              operations for 2 s with statement_timeout 1-5 ms and
#              lock_timeout 1-3 ms
# Kinds are drawn as shuffled rounds, so every kind occurs once before any
# occurs twice.  Before each fault the nemesis waits (bounded) until some
# client holds the lease again, so most faults hit a live leader.
#
# Every injected fault is one line of nemesis.log:
#   kind start_ns heal_ns detail
# on CLOCK_MONOTONIC, the clock of le_stress's client log; heal_ns is when
# the fault stopped acting (process continued, server accepting
# connections again, timeout window over).
package LeNemesis;

use strict;
use warnings;

use List::Util qw(shuffle);
use PostgreSQL::Test::Utils;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);

our @KINDS = qw(terminate pause crash restart timeouts);

sub mono_ns { return int(clock_gettime(CLOCK_MONOTONIC) * 1e9); }

# new(node => $node, dir => $dir, seed => N, ttl_ms => N, prefix => 'stress_',
#     kinds => [...], timeout_window_ms => N, max_faults => N, gap_ms => [lo, hi])
sub new
{
	my ($class, %o) = @_;
	my $self = bless {
		kinds             => [@KINDS],
		ttl_ms            => 1000,
		timeout_window_ms => 2000,
		max_faults        => 200,
		gap_ms            => [ 300, 1200 ],
		prefix            => 'stress_',
		%o,
		count => {},
		round => [],
	}, $class;

	srand($self->{seed});
	open $self->{log}, '>>', "$self->{dir}/nemesis.log"
	  or die "cannot write $self->{dir}/nemesis.log: $!";
	$self->{log}->autoflush(1);
	return $self;
}

# The client processes, from le_stress's pids file: { client id => pid }.
sub client_pids
{
	my ($self) = @_;
	return $self->{pids} if $self->{pids};
	open my $fh, '<', "$self->{dir}/pids" or die "no pids file: $!";
	my %pids = map { split ' ' } <$fh>;
	close $fh;
	return $self->{pids} = \%pids;
}

sub _query
{
	my ($self, $sql) = @_;
	my $timed_out;
	my ($rc, $out, $err) = $self->{node}->psql('postgres', $sql,
		timeout => 15, timed_out => \$timed_out);
	return !$timed_out && $rc == 0 ? $out : undef;
}

# (backend pid, client id) of a live holder of a lease, or ().
sub holder
{
	my ($self) = @_;
	my $out = $self->_query(
		"SELECT c.pid, substr(a.application_name, 12)
		   FROM leader_election.leases l
		  CROSS JOIN LATERAL current_leader(l.name) c
		   JOIN pg_stat_activity a ON a.pid = c.pid
		  WHERE starts_with(l.name, '$self->{prefix}')
		    AND a.application_name LIKE 'le_stress c%'
		  ORDER BY l.name LIMIT 1");
	return () unless defined $out && $out =~ /^(\d+)\|(\d+)$/;
	return ($1, $2);
}

# Wait until somebody holds a lease, at most $seconds.
sub wait_for_holder
{
	my ($self, $seconds) = @_;
	my $deadline = mono_ns() + $seconds * 1e9;
	while (mono_ns() < $deadline)
	{
		my @h = $self->holder;
		return @h if @h;
		usleep(100_000);
	}
	return ();
}

# Wait until the server accepts connections, at most 60 s.
sub wait_for_server
{
	my ($self) = @_;
	my $deadline = mono_ns() + 60e9;
	while (mono_ns() < $deadline)
	{
		my $out = $self->_query('SELECT 1');
		return 1 if defined $out && $out eq '1';
		usleep(50_000);
	}
	die "server did not come back within 60 s";
}

sub _record
{
	my ($self, $kind, $start, $heal, $detail) = @_;
	print { $self->{log} } "$kind $start $heal $detail\n";
	$self->{count}{$kind}++;
	return;
}

sub fault_terminate
{
	my ($self) = @_;
	my ($pid, $client) = $self->holder or return 0;
	my $start = mono_ns();
	my $out = $self->_query("SELECT pg_terminate_backend($pid)");
	return 0 unless defined $out && $out eq 't';
	$self->_record('terminate', $start, mono_ns(), "backend=$pid client=c$client");
	return 1;
}

sub fault_pause
{
	my ($self) = @_;
	my ($pid, $client) = $self->holder or return 0;
	my $os_pid = $self->client_pids->{$client} or return 0;
	my $ms = int($self->{ttl_ms} * (1.5 + rand(1.5)));
	my $start = mono_ns();
	kill 'STOP', $os_pid or return 0;
	$self->{stopped}{$os_pid} = 1;
	usleep($ms * 1000);
	kill 'CONT', $os_pid;
	delete $self->{stopped}{$os_pid};
	$self->_record('pause', $start, mono_ns(), "client=c$client pid=$os_pid ms=$ms");
	return 1;
}

sub fault_crash
{
	my ($self) = @_;
	my $out = $self->_query(
		"SELECT pid FROM pg_stat_activity
		  WHERE application_name LIKE 'le_stress c%' ORDER BY pid");
	return 0 unless $out;
	my @pids = split /\n/, $out;
	my $victim = $pids[ int(rand(@pids)) ];
	my $node = $self->{node};
	my $offset = -s $node->logfile;
	my $start = mono_ns();
	kill 'KILL', $victim or return 0;

	# The crash is over when the postmaster has reinitialised and accepts
	# connections again; look for its log line first, so a connection that
	# slipped in before the postmaster noticed the crash does not count.
	my $deadline = mono_ns() + 60e9;
	until (slurp_file($node->logfile, $offset) =~
		  /all server processes terminated; reinitializing/)
	{
		die "no crash restart after SIGKILL of backend $victim"
		  if mono_ns() > $deadline;
		usleep(50_000);
	}
	$self->wait_for_server;
	$self->_record('crash', $start, mono_ns(), "backend=$victim");
	return 1;
}

sub fault_restart
{
	my ($self) = @_;
	my $start = mono_ns();
	$self->{node}->stop('immediate');
	usleep(int(rand(500_000)));
	$self->{node}->start;
	$self->wait_for_server;
	$self->_record('restart', $start, mono_ns(), 'mode=immediate');
	return 1;
}

sub fault_timeouts
{
	my ($self) = @_;
	my $pids = $self->client_pids;
	my @ids = (shuffle(sort { $a <=> $b } keys %$pids))[ 0 .. int(rand(3)) ];
	my $start = mono_ns();
	kill 'USR1', map { $pids->{$_} } @ids;
	$self->_record('timeouts', $start,
		$start + $self->{timeout_window_ms} * 1e6,
		'clients=' . join(',', map { "c$_" } sort { $a <=> $b } @ids));
	return 1;
}

# run(seconds): inject faults until that many seconds have passed or
# max_faults were injected.  Returns { kind => count }.
sub run
{
	my ($self, $seconds) = @_;
	my $end = mono_ns() + $seconds * 1e9;
	my $injected = 0;
	my $settle = ($self->{ttl_ms} / 1000) * 4 + 2;

	while (mono_ns() < $end && $injected < $self->{max_faults})
	{
		my ($lo, $hi) = @{ $self->{gap_ms} };
		usleep(int(($lo + rand($hi - $lo)) * 1000));
		$self->wait_for_holder($settle);
		last if mono_ns() >= $end;

		$self->{round} = [ shuffle @{ $self->{kinds} } ] unless @{ $self->{round} };
		my $kind = shift @{ $self->{round} };
		my $method = "fault_$kind";
		$injected++ if $self->$method;
	}
	return $self->{count};
}

# Continue anything still stopped (a die in the middle of a pause).
sub cleanup
{
	my ($self) = @_;
	kill 'CONT', keys %{ $self->{stopped} || {} };
	return;
}

sub DESTROY { $_[0]->cleanup; }

1;
