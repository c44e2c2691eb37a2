"""A local S3 for tests and benchmarks: moto's S3 server (``moto[server]``, the test
extra), in a process of its own, with IAM permissions enforced.

moto checks a request's signature and its IAM policies only once "auth" is on (its
``INITIAL_NO_AUTH_ACTION_COUNT``, set at run time by ``POST /moto-api/reset-auth``). So
the emulator first makes, with auth off, two users: ``writer`` (every S3 action) and
``reader`` (``s3:ListBucket`` and ``s3:GetObject`` on the buckets named ``readable``, and
nothing else), then turns auth on: from then on a bucket the reader is not allowed is
answered 403 AccessDenied, as AWS answers a bucket without permissions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from profscope.testing.processes import ServerProcess, free_port

REGION = "us-east-1"


class S3Emulator(ServerProcess):
    """``with S3Emulator(buckets=("profiles", "locked"), readable=("profiles",)) as s3:``
    moto's S3 at ``s3.url`` with those buckets made;
    ``s3.options("reader")`` are s3fs options, ``s3.env("reader")`` the AWS_* environment
    a ``profscope`` process reads the same credentials and endpoint from."""

    def __init__(self, *, buckets: tuple[str, ...] = (), readable: tuple[str, ...] = (), port: int | None = None):
        self.buckets = tuple(buckets)
        self.readable = tuple(readable)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.keys: dict[str, tuple[str, str]] = {}

    def _popen(self) -> subprocess.Popen:
        # Its own process: a benchmark's emulator must not share the measured one's GIL.
        return subprocess.Popen(
            [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/moto-api/data.json", timeout=2):
                return True
        except OSError:
            return False

    def _setup(self) -> None:
        self._make_users()
        self._post("/moto-api/reset-auth", b"0")  # auth on, from the next request

    def _post(self, path: str, body: bytes) -> None:
        with urllib.request.urlopen(urllib.request.Request(self.url + path, data=body, method="POST",
                                                           headers={"Content-Type": "text/plain"}), timeout=10):
            pass

    def _make_users(self) -> None:
        import boto3

        setup = {"endpoint_url": self.url, "region_name": REGION, "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        s3 = boto3.client("s3", **setup)
        for bucket in self.buckets:
            s3.create_bucket(Bucket=bucket)
        iam = boto3.client("iam", **setup)
        everything = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        # AWS's managed AmazonS3ReadOnlyAccess (s3:Get*, s3:List*), narrowed to the readable
        # buckets. moto names an action after its API call where IAM does not: the listing
        # is "ListObjectsV2" (IAM: s3:ListBucket, hence the wildcard) and a HEAD of an
        # object "HeadObject" (IAM: s3:GetObject), so that one is allowed by its name.
        reading = [{"Effect": "Allow", "Action": ["s3:Get*", "s3:List*", "s3:HeadObject"],
                    "Resource": [r for b in self.readable for r in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")]}]
        for user, statements in (("writer", [everything]), ("reader", reading if self.readable else [])):
            iam.create_user(UserName=user)
            if statements:
                iam.put_user_policy(UserName=user, PolicyName=f"{user}-s3",
                                    PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
            key = iam.create_access_key(UserName=user)["AccessKey"]
            self.keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])

    def options(self, user: str = "reader") -> dict:
        key, secret = self.keys[user]
        return {"endpoint_url": self.url, "key": key, "secret": secret, "client_kwargs": {"region_name": REGION}}

    def env(self, user: str = "reader") -> dict:
        key, secret = self.keys[user]
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_DEFAULT_REGION": REGION}

    def filesystem(self, user: str = "writer"):
        """An s3fs client of ``user`` (the tests put their objects with the writer)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False, **self.options(user))


def main() -> None:
    """``python -m profscope.testing.s3_emulator BUCKET``: serve with BUCKET made and
    readable, print the reader's environment as JSON, serve until killed."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("bucket")
    args = p.parse_args()
    with S3Emulator(buckets=(args.bucket,), readable=(args.bucket,)) as s3:
        print(json.dumps({**s3.env("reader"), "writer": s3.options("writer")}), flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
