# LeHaCheck.pm: the checks that test/t/400_patroni.pl adds to C1-C7 for a
# history recorded across failovers (issue 14).
#
#   ack_overlaps(ops, ttl_ms, session)  acknowledged leases of different holders
#                               that overlap in time (C8)
#   task_overlaps(runs)         task runs on two nodes at once (C9)
#   leader_gaps(ops, faults)    per fault: how long no client was told it
#                               holds the lease, and the time from the
#                               fault to the first acknowledgement after it
#
# Input ops are the client-log records of LeStressCheck::load_dir (times:
# CLOCK_MONOTONIC ns of this machine, the clock every node shares here).
#
# The acknowledged lease of a term, as its client may rely on it: from the
# completion of the first "ok" acquisition (the grant happened before that)
# to the invocation of its last "ok" acquisition or renewal plus the ttl
# (the server stamped expires_at = its now() + ttl, and its now() came
# after that invocation); cut short by the client's own release, and for a
# session-bound lease by the client closing that session.  Both ends are
# bounds the client itself knows, so an overlap of two such intervals is a
# real double leadership, never an artefact of the bounds.
package LeHaCheck;

use strict;
use warnings;

use Exporter 'import';
our @EXPORT_OK = qw(ack_leases ack_overlaps task_overlaps leader_gaps);

# Two clocks (the server's for expires_at, CLOCK_MONOTONIC here) may drift
# by a hair over a run: overlaps below this are not reported.
our $TOLERANCE_NS = 1_000_000;

# ack_leases(ops, ttl_ms, session): [ { name, term, holder, client, start,
# end } ]; session: the leases are session-bound (le_stress
# --session-identity), so a client's new session ends its lease.
sub ack_leases
{
	my ($ops, $ttl_ms, $session) = @_;
	my $ttl_ns = $ttl_ms * 1e6;
	my (%lease, @order);
	my %by_client;
	push @{ $by_client{ $_->{client} } }, $_
	  for sort { $a->{invoke} <=> $b->{invoke} } @$ops;
	for my $c (sort keys %by_client)
	{
		my $cur;    # the lease this client holds now, per its log
		for my $op (@{ $by_client{$c} })
		{
			if ($op->{op} eq 'connect' && $cur && $session)
			{
				$cur->{end} = $op->{invoke} if $op->{invoke} < $cur->{end};
				undef $cur;
				next;
			}
			if ($op->{op} eq 'release' && $cur && ($op->{term} // '') eq $cur->{term})
			{
				$cur->{end} = $op->{invoke} if $op->{invoke} < $cur->{end};
				undef $cur;
				next;
			}
			next unless $op->{op} =~ /^(acquire|wait|renew)$/ && $op->{result} eq 'ok';
			my $k = join "\0", $op->{name}, $op->{term}, $op->{holder};
			my $l = $lease{$k};
			if (!$l)
			{
				$l = $lease{$k} = {
					name   => $op->{name},
					term   => $op->{term},
					holder => $op->{holder},
					client => $c,
					start  => $op->{complete},
					end    => $op->{invoke} + $ttl_ns,
				};
				push @order, $l;
			}
			else
			{
				$l->{end} = $op->{invoke} + $ttl_ns if $op->{invoke} + $ttl_ns > $l->{end};
			}
			$cur = $l;
		}
	}
	return \@order;
}

# ack_overlaps(ops, ttl_ms, session): [ [ lease_a, lease_b, overlap_ns ] ],
# the worst first; leases of one holder are not compared with each other.
sub ack_overlaps
{
	my ($ops, $ttl_ms, $session) = @_;
	my @l = sort { $a->{name} cmp $b->{name} || $a->{start} <=> $b->{start} }
	  grep { $_->{end} > $_->{start} } @{ ack_leases($ops, $ttl_ms, $session) };
	my @out;
	for my $i (0 .. $#l)
	{
		for my $j ($i + 1 .. $#l)
		{
			last if $l[$j]{name} ne $l[$i]{name};
			last if $l[$j]{start} >= $l[$i]{end};
			next if $l[$j]{holder} eq $l[$i]{holder};
			my $end = $l[$i]{end} < $l[$j]{end} ? $l[$i]{end} : $l[$j]{end};
			my $ov = $end - $l[$j]{start};
			push @out, [ $l[$i], $l[$j], $ov ] if $ov > $TOLERANCE_NS;
		}
	}
	return [ sort { $b->[2] <=> $a->[2] } @out ];
}

# task_overlaps(runs): runs = [ { node, start, end } ] (any one clock);
# pairs of runs on different nodes whose intervals intersect.
sub task_overlaps
{
	my ($runs) = @_;
	my @r = sort { $a->{start} <=> $b->{start} } @$runs;
	my @out;
	for my $i (0 .. $#r)
	{
		for my $j ($i + 1 .. $#r)
		{
			last if $r[$j]{start} >= $r[$i]{end};
			push @out, [ $r[$i], $r[$j] ] if $r[$j]{node} ne $r[$i]{node};
		}
	}
	return \@out;
}

# leader_gaps(ops, faults): per fault (in order) { kind, gap_ns,
# first_ns }: gap_ns is the longest stretch between two consecutive "ok"
# lease acknowledgements (acquire, wait, renew) that touches the window
# from the fault's start to its heal; first_ns is the time from the
# fault's start to the first acknowledgement invoked after it.
sub leader_gaps
{
	my ($ops, $faults) = @_;
	my @ok = sort { $a <=> $b } map { $_->{complete} }
	  grep { $_->{op} =~ /^(acquire|wait|renew)$/ && $_->{result} eq 'ok' } @$ops;
	my @out;
	for my $f (@$faults)
	{
		my ($gap, $prev) = (0, undef);
		for my $t (@ok)
		{
			if (defined $prev && $t >= $f->{start} && $prev <= $f->{heal})
			{
				$gap = $t - $prev if $t - $prev > $gap;
			}
			$prev = $t;
			last if $t > $f->{heal} && $prev > $f->{heal} && $gap;
		}
		my ($first) = sort { $a->{complete} <=> $b->{complete} }
		  grep {
			$_->{op} =~ /^(acquire|wait|renew)$/
			  && $_->{result} eq 'ok'
			  && $_->{invoke} >= $f->{start}
		  } @$ops;
		push @out, {
			kind     => $f->{kind},
			gap_ns   => $gap,
			first_ns => $first ? $first->{complete} - $f->{start} : undef,
		};
	}
	return \@out;
}

1;
