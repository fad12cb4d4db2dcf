"""`launch --check`: a health check of the whole allocation, run by every rank before (or instead of) the job.

Every rank runs `python -m zerokit.healthcheck [options] [-- command]` (command.py builds that argv for
launch): a bounded rendezvous that names who never arrived (rendezvous.py), the per-node facts
(facts.py), a barrier and an all-reduce/all-gather size sweep as nccl-tests reports them (sweep.py), a
point-to-point test of every node pair (links.py) with the transport it went over (transport.py), then
rank 0 judges (verdict.py) and prints the report (report.py). A passing check execs the command; a failing
one exits non-zero on every rank.
"""
