"""Certificates for the control plane's mutual TLS (docs/cluster.md "What is authenticated").

The launcher makes a cluster CA and signs one certificate per node with it; every rank presents
its node's certificate and accepts only peers whose certificate that CA signed. On one machine
the CA is made fresh per launch and its key never leaves the launcher's private directory; for
several machines `python -m actorflow.launch --make-ca DIR` makes it once, and DIR is copied to
every node (like the cluster secret: whoever holds ca.key can join).

Files are written with mode 0600 into directories this module creates (mode 0700); an existing
file or non-empty directory is never overwritten. Uses the `cryptography` package (Debian
python3-cryptography).
"""
import datetime
import os
import tempfile

CA_CERTIFICATE = "ca.pem"
CA_KEY = "ca.key"


def _crypto():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as error:
        raise RuntimeError("actorflow.launch: TLS needs the 'cryptography' package (Debian python3-cryptography): %s"
                           % error)
    return x509, hashes, serialization, ec, NameOID


def _write_private(path, data):
    """Creates `path` (never replaces one) readable by this user only."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)


def _name(common_name):
    x509, _, _, _, NameOID = _crypto()
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject, issuer, public_key, signing_key, is_ca, days):
    """A certificate for `subject` (a common name) signed by `signing_key` as `issuer` (the
    signer's x509.Name, or None: self-signed)."""
    x509, hashes, _, _, _ = _crypto()
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject))
               .issuer_name(issuer if issuer is not None else _name(subject))
               .public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))  # tolerate clock skew between nodes
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), critical=True))
    return builder.sign(signing_key, hashes.SHA256())


def _new_key():
    _, _, _, ec, _ = _crypto()
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key):
    _, _, serialization, _, _ = _crypto()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_certificate(certificate):
    _, _, serialization, _, _ = _crypto()
    return certificate.public_bytes(serialization.Encoding.PEM)


def make_ca(directory, days=30):
    """Writes a new cluster CA (ca.pem, ca.key) into `directory`, which must not exist or be empty."""
    if os.path.exists(directory):
        if not os.path.isdir(directory) or os.listdir(directory):
            raise FileExistsError("actorflow.launch: %r exists and is not an empty directory; the cluster CA is only "
                                  "written into a new or empty one" % directory)
    else:
        os.makedirs(directory, mode=0o700)
    key = _new_key()
    name = "actorflow cluster CA " + os.urandom(6).hex()
    certificate = _certificate(name, None, key.public_key(), key, True, days)
    _write_private(os.path.join(directory, CA_KEY), _pem_key(key))
    _write_private(os.path.join(directory, CA_CERTIFICATE), _pem_certificate(certificate))
    return directory


def load_ca(directory):
    """(certificate, key) of the CA in `directory` (made by make_ca); clear errors otherwise."""
    x509, _, serialization, _, _ = _crypto()
    paths = [os.path.join(directory, name) for name in (CA_CERTIFICATE, CA_KEY)]
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError("actorflow.launch: the cluster CA directory %r has no %s (make one with "
                                    "`python -m actorflow.launch --make-ca DIR`)" % (directory, os.path.basename(path)))
    try:
        with open(paths[0], "rb") as file:
            certificate = x509.load_pem_x509_certificate(file.read())
        with open(paths[1], "rb") as file:
            key = serialization.load_pem_private_key(file.read(), password=None)
    except (ValueError, TypeError, OSError) as error:
        raise ValueError("actorflow.launch: cannot read the cluster CA in %r: %s" % (directory, error))
    if certificate.public_key().public_numbers() != key.public_key().public_numbers():
        raise ValueError("actorflow.launch: %s and %s in %r do not belong together" % (CA_CERTIFICATE, CA_KEY, directory))
    return certificate, key


def node_files(directory, ca_certificate, ca_key, node_name, days=30):
    """Signs a fresh key and certificate for one node into `directory` (node.pem, node.key,
    ca.pem); returns their paths (certificate, key, ca)."""
    key = _new_key()
    certificate = _certificate(node_name, ca_certificate.subject, key.public_key(), ca_key, False, days)
    paths = tuple(os.path.join(directory, name) for name in ("node.pem", "node.key", CA_CERTIFICATE))
    _write_private(paths[0], _pem_certificate(certificate))
    _write_private(paths[1], _pem_key(key))
    _write_private(paths[2], _pem_certificate(ca_certificate))
    return paths


def private_directory():
    """A fresh directory only this user can read (mode 0700), for one launch's TLS files."""
    return tempfile.mkdtemp(prefix="actorflow-tls-")


def launch_files(ca_directory, node_name):
    """The TLS files of one launch, in a fresh private directory: the node's certificate signed
    by the CA in `ca_directory`, or (None) by a CA made for this launch alone. Returns
    (directory, (certificate, key, ca)); the caller removes the directory at the end."""
    directory = private_directory()
    try:
        if ca_directory is None:
            ca_key = _new_key()
            name = "actorflow launch CA " + os.urandom(6).hex()
            ca_certificate = _certificate(name, None, ca_key.public_key(), ca_key, True, 2)
        else:
            ca_certificate, ca_key = load_ca(ca_directory)
        return directory, node_files(directory, ca_certificate, ca_key, node_name)
    except BaseException:
        _remove(directory)
        raise


def _remove(directory):
    import shutil
    shutil.rmtree(directory, ignore_errors=True)


remove_launch_files = _remove
