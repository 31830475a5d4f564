# LeStressCheck.pm: the history checkers of the leader_election stress test
# (research/anchors-reliability.md §A.3, §B.4).
#
# Input: a directory written by le_stress and the nemesis:
#   history.tsv  leader_election.history: name term holder acquired_us ended_us end_reason session_bound
#   audit.tsv    stress.audit, written in each winning (or releasing)
#                transaction: id name term holder kind client seq at_us
#                acquired_us renewed_us expires_us   (id order = grant order:
#                grants of one name are serialised by its writer lock)
#   effects.tsv  stress.effects, the fenced writes: name pos term holder client seq at_us
#                (pos = commit order: the counter row lock serialises writers)
#   client.log   client op invoke_ns complete_ns result term sqlstate seq name holder
#                (op: connect acquire wait renew effect release stall)
#   nemesis.log  kind start_ns heal_ns detail...   (optional)
#   params       key value lines (ttl_ms, retry_ms, stall_ms, ...)
# Server times are epoch microseconds on the server's clock; client and
# nemesis times are CLOCK_MONOTONIC nanoseconds of this machine.
#
# Checkers (each violation is reported with the checker's name):
#   C1 one holder per (name, term), across audit, history, client oks, effects
#   C2 terms strictly increase per name in grant order, and along history
#   C3 no two grants overlap on the server clock: a grant of a new term comes
#      no earlier than the end of the previous term: the smaller of its last
#      renewed expires_at and its release; for a session-bound term also
#      the moment the server saw its session gone (history.ended_at)
#   C4 fenced effects in commit order never go back in term, are written by
#      the holder of their term, and come after the grant of their term
#   C5 every client "ok" acquisition or renewal matches a server grant of
#      that term and holder (no phantom grants); a definite "fail" left no
#      grant behind; history and audit agree on the terms granted
#   C6 liveness: after each fault heals, some client holds the lease within
#      ttl + 1.5 retry + stall + slack, judged up to the next fault (so a
#      fault followed too soon by another is judged only if it recovered)
#   C7 acknowledged effects are in the table, definitely failed ones are not
#      (an "info" outcome may go either way)
#
# check() returns { violations => [ [checker, message], ... ],
# figures => {...} }; the command line wrapper is check.pl.
package LeStressCheck;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(load_dir check report);

# ---- loading ----

sub _tsv
{
	my ($path, @cols) = @_;
	my @rows;

	open my $fh, '<', $path or die "cannot read $path: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line eq '';
		my @f = split /\t/, $line, -1;
		my %r;
		@r{@cols} = map { $_ eq '\N' ? undef : $_ } @f;
		push @rows, \%r;
	}
	close $fh;
	return \@rows;
}

sub _words
{
	my ($path, @cols) = @_;
	my @rows;

	return [] unless -e $path;
	open my $fh, '<', $path or die "cannot read $path: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line =~ /^\s*(#|$)/;
		my @f = split ' ', $line, scalar @cols;
		my %r;
		@r{@cols} = map { defined $_ && $_ eq '-' ? undef : $_ } @f;
		push @rows, \%r;
	}
	close $fh;
	return \@rows;
}

# load_dir(dir): the history of one run, as check() takes it.
sub load_dir
{
	my ($dir) = @_;
	my %params;

	if (open my $fh, '<', "$dir/params")
	{
		while (<$fh>)
		{
			$params{$1} = $2 if /^(\S+)\s+(.*)$/;
		}
		close $fh;
	}
	return {
		params  => \%params,
		history => _tsv("$dir/history.tsv",
			qw(name term holder acquired_at ended_at end_reason session_bound)),
		audit => _tsv("$dir/audit.tsv",
			qw(id name term holder kind client seq at acquired_at renewed_at expires_at)),
		effects => _tsv("$dir/effects.tsv",
			qw(name pos term holder client seq at)),
		ops => _words("$dir/client.log",
			qw(client op invoke complete result term sqlstate seq name holder)),
		faults => _words("$dir/nemesis.log", qw(kind start heal detail)),
	};
}

# ---- checking ----

# check(data, slack_ms => 5000)
sub check
{
	my ($d, %o) = @_;
	my @v;
	my %fig;
	my $p = $d->{params};
	my $slack_ms = $o{slack_ms} // 5000;
	my $bad = sub { push @v, [@_] };

	# Grants from the audit: per name, the terms in grant order with their
	# first grant time, last expiry, holder and release time.
	my (%terms, %term_info);
	for my $a (sort { $a->{id} <=> $b->{id} } @{ $d->{audit} })
	{
		my ($n, $t) = ($a->{name}, $a->{term});
		if ($a->{kind} eq 'release')
		{
			my $ti = $term_info{$n}{$t};
			if (!$ti)
			{
				$bad->('C5', "release of $n term $t by $a->{holder} without a grant in the audit");
				next;
			}
			$ti->{released_at} = $a->{at}
			  unless defined $ti->{released_at} && $ti->{released_at} <= $a->{at};
			next;
		}
		my $ti = $term_info{$n}{$t};
		if (!$ti)
		{
			$ti = $term_info{$n}{$t} = {
				term       => $t,
				holder     => $a->{holder},
				granted_at => $a->{acquired_at},
				expires_at => $a->{expires_at},
			};
			push @{ $terms{$n} }, $ti;
		}
		elsif ($ti->{holder} ne $a->{holder})
		{
			$bad->('C1', "$n term $t granted to $ti->{holder} and to $a->{holder} (audit id $a->{id})");
		}
		else
		{
			# A renewal must not move the start of the term.
			$bad->('C1', "$n term $t: renewal (audit id $a->{id}) changed acquired_at")
			  if $a->{acquired_at} != $ti->{granted_at};
			$ti->{expires_at} = $a->{expires_at}
			  if $a->{expires_at} > $ti->{expires_at};
		}
		$fig{renewals}++ if $ti->{granted_at} != $a->{renewed_at};
	}

	# C2 in grant (audit) order: each new term above every earlier one.
	for my $n (sort keys %terms)
	{
		my $list = $terms{$n};
		for my $i (1 .. $#$list)
		{
			$bad->('C2', "$n: term $list->[$i]{term} granted after term $list->[$i-1]{term}")
			  unless $list->[$i]{term} > $list->[ $i - 1 ]{term};
		}
		# C2 also holds in the audit rows themselves: a term, once left, never
		# comes back (the list above has each term once, so look at the rows).
		my $max = -1;
		for my $a (grep { $_->{name} eq $n && $_->{kind} ne 'release' }
			sort { $a->{id} <=> $b->{id} } @{ $d->{audit} })
		{
			$bad->('C2', "$n: audit id $a->{id} grants term $a->{term} after term $max")
			  if $a->{term} < $max;
			$max = $a->{term} if $a->{term} > $max;
		}
		$fig{grants} += @$list;
	}

	# History: one row per term (primary key), terms rising with time, and
	# the same holder and start as the audit says.
	my %hist;
	for my $h (@{ $d->{history} })
	{
		$hist{ $h->{name} }{ $h->{term} } = $h;
		my $ti = $term_info{ $h->{name} }{ $h->{term} };
		if (!$ti)
		{
			$bad->('C5', "history has $h->{name} term $h->{term} ($h->{holder}) but no client recorded its grant");
			next;
		}
		$bad->('C1', "$h->{name} term $h->{term}: history says holder $h->{holder}, the grant said $ti->{holder}")
		  if $h->{holder} ne $ti->{holder};
		$bad->('C3', "$h->{name} term $h->{term}: history acquired_at differs from the grant's")
		  if $h->{acquired_at} != $ti->{granted_at};
		$ti->{history} = $h;
	}
	for my $n (sort keys %hist)
	{
		my @h = sort { $a->{acquired_at} <=> $b->{acquired_at} || $a->{term} <=> $b->{term} }
		  values %{ $hist{$n} };
		for my $i (1 .. $#h)
		{
			$bad->('C2', "$n: history term $h[$i]{term} began no later than term $h[$i-1]{term}")
			  unless $h[$i]{term} > $h[ $i - 1 ]{term}
			  && $h[$i]{acquired_at} > $h[ $i - 1 ]{acquired_at};
		}
	}
	for my $n (sort keys %terms)
	{
		for my $ti (@{ $terms{$n} })
		{
			$bad->('C5', "$n term $ti->{term} granted to $ti->{holder} but missing from leader_election.history")
			  unless $hist{$n}{ $ti->{term} };
		}
	}

	# C3: consecutive grants of a name do not overlap on the server clock.
	for my $n (sort keys %terms)
	{
		my $list = $terms{$n};
		for my $i (1 .. $#$list)
		{
			my ($prev, $next) = ($list->[ $i - 1 ], $list->[$i]);
			my $end = $prev->{expires_at};
			$end = $prev->{released_at}
			  if defined $prev->{released_at} && $prev->{released_at} < $end;
			my $h = $prev->{history};
			if ($h && $h->{session_bound} eq 't'
				&& ($h->{end_reason} // '') eq 'session_ended'
				&& defined $h->{ended_at} && $h->{ended_at} < $end)
			{
				# The holder's backend was gone: the lease ended then.
				$end = $h->{ended_at};
			}
			if ($next->{granted_at} < $end)
			{
				$bad->('C3', sprintf("%s: term %s granted to %s at %d, %.3f s before term %s of %s ended",
					$n, $next->{term}, $next->{holder}, $next->{granted_at},
					($end - $next->{granted_at}) / 1e6, $prev->{term}, $prev->{holder}));
			}
			# The extension's own record of the end must agree: set once a
			# later term exists, no later than the next grant, and for an
			# expiry exactly the last renewed expires_at.
			next unless $h;
			if (!defined $h->{ended_at})
			{
				$bad->('C3', "$n term $prev->{term}: history has no end although term $next->{term} followed");
			}
			elsif ($h->{ended_at} > $next->{granted_at})
			{
				$bad->('C3', "$n term $prev->{term}: history says it ended after term $next->{term} began");
			}
			elsif ($h->{end_reason} eq 'expired'
				&& $h->{ended_at} != $prev->{expires_at})
			{
				$bad->('C3', sprintf("%s term %s: history says it expired at %d, its last renewal said %d",
					$n, $prev->{term}, $h->{ended_at}, $prev->{expires_at}));
			}
		}
	}

	# C4: fenced effects in commit order.
	my %effect_by_op;
	my %effects_by_name;
	push @{ $effects_by_name{ $_->{name} } }, $_ for @{ $d->{effects} };
	for my $n (sort keys %effects_by_name)
	{
		my ($max, $max_pos) = (-1, undef);
		for my $e (sort { $a->{pos} <=> $b->{pos} } @{ $effects_by_name{$n} })
		{
			$effect_by_op{"$e->{client}/$e->{seq}"} = $e;
			$fig{effects}++;
			if ($e->{term} < $max)
			{
				$bad->('C4', "$n: effect at position $e->{pos} (client $e->{client} seq $e->{seq}) has stale term $e->{term} after term $max (position $max_pos)");
			}
			elsif ($e->{term} > $max)
			{
				($max, $max_pos) = ($e->{term}, $e->{pos});
			}
			my $ti = $term_info{$n}{ $e->{term} };
			if (!$ti)
			{
				$bad->('C4', "$n: effect at position $e->{pos} in term $e->{term}, which was never granted");
				next;
			}
			$bad->('C4', "$n: effect at position $e->{pos} in term $e->{term} written by $e->{holder}, not by the term's holder $ti->{holder}")
			  if $e->{holder} ne $ti->{holder};
			$bad->('C4', "$n: effect at position $e->{pos} written before the grant of its term $e->{term}")
			  if $e->{at} < $ti->{granted_at};
		}
	}

	# Client operations.
	my %audit_by_op;
	for my $a (@{ $d->{audit} })
	{
		$audit_by_op{"$a->{client}/$a->{seq}"} = $a;
	}
	my %ok_holder;
	for my $op (@{ $d->{ops} })
	{
		my $key = "$op->{client}/$op->{seq}";
		$fig{ops}++;
		$fig{"op_$op->{op}_$op->{result}"}++;
		$fig{"sqlstate_$op->{sqlstate}"}++ if defined $op->{sqlstate};
		if ($op->{op} =~ /^(acquire|wait|renew)$/)
		{
			my $a = $audit_by_op{$key};
			if ($op->{result} eq 'ok')
			{
				my $t = $op->{term};
				my $h = $hist{ $op->{name} }{$t};
				if (!$a || $a->{term} != $t || $a->{holder} ne $op->{holder})
				{
					$bad->('C5', "client $op->{client} seq $op->{seq}: $op->{op} ok in $op->{name} term $t as $op->{holder}, but no such grant was committed");
				}
				elsif (!$h || $h->{holder} ne $op->{holder})
				{
					$bad->('C5', "client $op->{client} seq $op->{seq}: $op->{op} ok in $op->{name} term $t, but history does not show $op->{holder} in that term");
				}
				my $k = "$op->{name}/$t";
				if (defined $ok_holder{$k} && $ok_holder{$k} ne $op->{holder})
				{
					$bad->('C1', "$op->{name} term $t: clients were told both $ok_holder{$k} and $op->{holder} hold it");
				}
				$ok_holder{$k} //= $op->{holder};
			}
			elsif ($op->{result} eq 'fail' && $a)
			{
				$bad->('C5', "client $op->{client} seq $op->{seq}: $op->{op} failed definitely, yet its grant of term $a->{term} committed");
			}
		}
		elsif ($op->{op} eq 'effect')
		{
			my $e = $effect_by_op{$key};
			if ($op->{result} eq 'ok' && !$e)
			{
				$bad->('C7', "client $op->{client} seq $op->{seq}: effect acknowledged in term $op->{term} but not in the table");
			}
			elsif ($op->{result} eq 'fail' && $e)
			{
				$bad->('C7', "client $op->{client} seq $op->{seq}: effect failed definitely, yet it is at position $e->{pos}");
			}
		}
	}

	# C6: liveness after faults heal.
	my $ttl_ms = $p->{ttl_ms} // 1000;
	my $bound_ns = int(($ttl_ms + 1.5 * ($p->{retry_ms} // 250)
		  + ($p->{stall_ms} // 0) + $slack_ms) * 1e6);
	my @held = sort { $a->{complete} <=> $b->{complete} }
	  grep { $_->{op} =~ /^(acquire|wait|renew)$/ && $_->{result} eq 'ok' }
	  @{ $d->{ops} };
	my $last_op = 0;
	for (@{ $d->{ops} })
	{
		$last_op = $_->{complete} if $_->{complete} > $last_op;
	}
	my @names = sort keys %{ { map { $_->{name} => 1 } @{ $d->{ops} } } };
	my @faults = sort { $a->{heal} <=> $b->{heal} } @{ $d->{faults} };
	$fig{"fault_$_->{kind}"}++ for @faults;
	$fig{faults} = scalar @faults;
	$fig{liveness_bound_s} = $bound_ns / 1e9;
	# Each fault is judged over the window until the next fault starts (the
	# end of the run after the last one): a lease must be held within the
	# bound, unless the window is shorter than the bound and nobody held it
	# before the next fault came (then the fault cannot be judged alone).
	my ($max_recovery, $sum_recovery, $judged) = (0, 0, 0);
	for my $i (0 .. $#faults)
	{
		my $f = $faults[$i];
		my $last = $i == $#faults;
		my $window_end = $last ? $last_op : $faults[ $i + 1 ]{start};
		for my $n (@names)
		{
			my ($first) = grep {
				$_->{name} eq $n
				  && $_->{complete} >= $f->{heal}
				  && $_->{complete} <= $window_end
			} @held;
			my $took = $first ? $first->{complete} - $f->{heal} : undef;
			if (defined $took && $took <= $bound_ns)
			{
				$judged++;
				$sum_recovery += $took;
				$max_recovery = $took if $took > $max_recovery;
			}
			elsif ($window_end >= $f->{heal} + $bound_ns)
			{
				$judged++;
				$bad->('C6', sprintf("%s: no leader within %.1f s after the %s fault healed%s",
					$n, $bound_ns / 1e9, $f->{kind},
					defined $took ? sprintf(" (took %.3f s)", $took / 1e9) : ''));
			}
			elsif ($last)
			{
				$bad->('C6', sprintf("the run ended %.3f s after the last fault (%s) healed: too soon to judge liveness",
					($last_op - $f->{heal}) / 1e9, $f->{kind}));
			}
		}
	}
	$fig{faults_judged} = $judged;
	$fig{mean_recovery_s} = sprintf('%.3f', $judged ? $sum_recovery / $judged / 1e9 : 0);
	if (!@faults && @held == 0 && @{ $d->{ops} })
	{
		$bad->('C6', 'no client ever held the lease');
	}
	$fig{max_recovery_s} = sprintf('%.3f', $max_recovery / 1e9);
	$fig{$_} //= 0 for qw(grants renewals effects ops faults);

	my %count;
	$count{ $_->[0] }++ for @v;
	$fig{"violations_$_"} = $count{$_} for keys %count;
	$fig{violations} = scalar @v;
	return { violations => \@v, figures => \%fig };
}

# report(result): printable lines, figures first.
sub report
{
	my ($r) = @_;
	my $f = $r->{figures};
	my @out;

	push @out, sprintf("ops %d, grants %d, renewals %d, effects %d, faults %d, violations %d",
		map { $f->{$_} // 0 } qw(ops grants renewals effects faults violations));
	push @out, 'faults by kind: '
	  . (join(', ', map { /^fault_(.*)/ ? "$1 $f->{$_}" : () } sort keys %$f) || 'none');
	push @out, 'ops by kind and result: '
	  . join(', ', map { /^op_(.*)/ ? "$1 $f->{$_}" : () } sort keys %$f);
	push @out, 'error SQLSTATEs: '
	  . (join(', ', map { /^sqlstate_(.*)/ ? "$1 $f->{$_}" : () } sort keys %$f) || 'none');
	push @out, sprintf("liveness: bound %s s; %d fault windows judged; recovery after heal: mean %s s, slowest %s s",
		$f->{liveness_bound_s}, $f->{faults_judged} // 0, $f->{mean_recovery_s} // 0, $f->{max_recovery_s});
	push @out, 'violations by checker: '
	  . (join(', ', map { /^violations_(.*)/ ? "$1 $f->{$_}" : () } sort keys %$f) || 'none');
	my $shown = 0;
	for my $v (@{ $r->{violations} })
	{
		last if ++$shown > 50;
		push @out, "VIOLATION $v->[0]: $v->[1]";
	}
	return @out;
}

1;
