"""What a run saves and resumes: writer (the background writer thread, the ranks' agreement, publication), files
(one file written whole), capture (the Trainer's large files copied, not written), host_snapshot (the host copies,
in buffers reused by the next save); resume_match (a resume's checkpoint against the run) and resharded (a resume
on another rank count); node_copies/ (`--memory-checkpoints`: copies in the nodes' memory).
"""
