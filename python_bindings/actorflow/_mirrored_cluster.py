"""The mirrored view across machines (docs/cluster.md, "Mirrored view across machines"): every
rank calls the job function itself with one array per device of its own machine for each list
placeholder (tp.ListNumpy / tp.ListListNumpy), and gets back its own devices' parts of each
list result.

How: a list placeholder of a job on M machines becomes M placeholders, placeholder m placed on
machine m's devices (split on axis 0 over them) and holding machine m's rows; the job's logical
input is their concatenation on axis 0 (machine order: machine m's devices are devices
m*d..m*d+d-1 of the logical split). Each rank's process instantiates only its machine's tasks
(graph::ExtractMachinePlan), so it reads only its own placeholder's feed: the rank fills the
other machines' slots with its own array (same shape and dtype, never read). Gradients are
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
        """Adds machine m's placeholder for every m and returns the ref of their concatenation
        (the logical blob, rows * devices of all machines on axis 0)."""
        d = self.devices_per_machine
        shape = [per_device_shape[0] * d] + list(per_device_shape[1:])
        parts = []
        for machine in range(self.machines):
            builder.set_placement("cpu", "%d:0-%d" % (machine, d - 1) if d > 1 else "%d:0" % machine)
            try:
                ref = builder.add_input(pname if machine == 0 else "%s@machine%d" % (pname, machine), shape,
                                        dtype_name, location)
                if d > 1:
                    builder.set_output_sbp(ref, "split", 0)
            finally:
                builder.clear_placement()
            parts.append(ref)
        # A concatenation on axis 0 cannot be split on axis 0 (its inputs' rows would
        # interleave): the compiler concatenates another layout (split on axis 1 for the seed
        # MLP) and boxes it to the identity's split on axis 0 (the caller's hint), so each
        # machine's rows cross the network and come back (about the machine's rows' bytes
        # received per machine and call) before every device holds its own.
        joined = builder.add_op("concat", pname + "-machines", parts, {"axis": 0}, location)[0][0]
        return builder.add_op("identity", pname + "-devices", [joined], {}, location)[0][0]

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
        feed, rows = list_feed(pname, spec, value, self.devices_per_machine)
        if rows is not None:
            raise ValueError("argument '%s' of job '%s' on rank %d has %s rows per device: in the mirrored view "
                             "across machines every device takes exactly the placeholder's %d rows (dynamic lists "
                             "are supported in one process only)" % (pname, self.job_name, self.rank, list(rows),
                                                                     spec.shape[0]))
        return feed

    def machine_feeds(self, feed):
        """The job's M feeds of one list placeholder: this rank's at every slot (only its own
        machine's slot is read here; the others are read by their own ranks)."""
        return [feed] * self.machines

    def own_parts(self, parts):
        """This rank's devices' parts of a list result split over every device of every machine."""
        first = self.rank * self.devices_per_machine
        return parts[first:first + self.devices_per_machine]


def expand_feeds(mirror, specs, feeds):
    """The feeds in the compiled job's order: each list placeholder's feed repeated per machine."""
    expanded = []
    for (_pname, spec), feed in zip(specs, feeds):
        if spec.kind == "numpy":
            expanded.append(feed)
        else:
            expanded.extend(mirror.machine_feeds(feed))
    return expanded
