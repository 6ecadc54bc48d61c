"""The mirrored view across machines (docs/cluster.md, "Mirrored view across machines"): every
rank calls the job function itself with one array per device of its own machine for each list
placeholder (tp.ListNumpy / tp.ListListNumpy), and gets back its own devices' parts of each
list result.

How: a list placeholder of a job on M machines is one placeholder over every device of every
machine, split on axis 0 (machine m's devices are devices m*d..m*d+d-1 of the split), fed per
machine (graph::FedPerMachine): the compiler makes one source per machine holding that
machine's rows, each device reads its rows of its own machine's source in place, and this
rank's call feeds only its own rows. Each list result is fetched per machine
(graph::OutputPerMachine): a rank's call returns its own devices' rows only. Gradients are
summed across all devices of all machines as in the consistent view (one ALL_REDUCE per
machine), so M ranks of d devices train as one process of M*d devices fed the same arrays.
"""


class ClusterMirror:
    """How one job's list placeholders and list results map to this rank's devices."""

    def __init__(self, job_name, machines, rank, devices_per_machine):
        self.job_name = job_name
        self.machines = machines
        self.rank = rank
        self.devices_per_machine = devices_per_machine

    def add_input(self, builder, pname, per_device_shape, dtype_name, location):
        """Adds the placeholder fed per machine and returns its ref (the logical blob: rows *
        devices of all machines on axis 0; the caller hints it S(0))."""
        shape = [per_device_shape[0] * self.devices_per_machine * self.machines] + list(per_device_shape[1:])
        ref = builder.add_input(pname, shape, dtype_name, location)
        builder.set_fed_per_machine(ref)
        return ref

    def check_count(self, pname, what, value):
        """A rank passes one entry per device of its own machine."""
        if not isinstance(value, (list, tuple)) or len(value) != self.devices_per_machine:
            raise TypeError("argument '%s' of job '%s' is a %s.Placeholder in the mirrored view across %d machines: "
                            "rank %d passes one entry per device of its own machine, expected a list of %d, got %s" % (
                                pname, self.job_name, what, self.machines, self.rank, self.devices_per_machine,
                                "a list of %d" % len(value) if isinstance(value, (list, tuple))
                                else type(value).__name__))

    def list_feed(self, list_feed, pname, spec, value):
        """This rank's feed of a list placeholder (list_feed: JobFunction._list_feed with the
        device count given). Every device must hold the placeholder's rows: per-device arrays
        with fewer rows (dynamic lists) recompile the job per call shape on one rank, which
        the other ranks, fed other shapes, would not follow."""
        what = "tp.ListListNumpy" if spec.kind == "list_list_numpy" else "tp.ListNumpy"
        self.check_count(pname, what, value)
        try:
            feed, rows = list_feed(pname, spec, value, self.devices_per_machine)
        except (TypeError, ValueError) as error:
            # Raised before anything is pushed: this rank's call did not happen (the others'
            # wait for it, up to the call deadline); say which rank's arguments were wrong.
            raise type(error)("job '%s' on rank %d of %d (mirrored view, this rank's own devices): %s" % (
                self.job_name, self.rank, self.machines, error)) from None
        if rows is not None:
            raise ValueError("argument '%s' of job '%s' on rank %d has %s rows per device: in the mirrored view "
                             "across machines every device takes exactly the placeholder's %d rows (dynamic lists "
                             "are supported in one process only)" % (pname, self.job_name, self.rank, list(rows),
                                                                     spec.shape[0]))
        return feed

    def own_outputs(self, builder, refs, list_indices, location):
        """The job's outputs with each list result fetched per machine (graph::OutputPerMachine):
        an identity laid out S(0) over every device of every machine, whose rows each rank's call
        gets only for its own devices (nothing of it crosses machines)."""
        refs = list(refs)
        for index in list_indices:
            producer = refs[index].split("/")[0]
            own = builder.add_op("identity", producer + "-own", [refs[index]], {"output_per_machine": True},
                                 location)[0][0]
            builder.set_output_sbp(own, "split", 0)
            refs[index] = own
        return refs
