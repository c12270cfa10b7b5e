"""mlcc.progress against the C header it mirrors (patches/progress/mlcc_progress.h)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
HEADER_DIR = os.path.join(HERE, "..", "..", "patches", "progress")

from mlcc import progress  # noqa: E402

C_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>
#include "mlcc_progress.h"
#define H(f) printf("\"%s\": %zu,\n", #f, offsetof(struct mlcc_progress_header, f))
#define C(f) printf("\"%s\": %zu,\n", #f, MLCC_PROGRESS_HEADER_SIZE + offsetof(struct mlcc_progress_counters, f))
int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "layout")) {
        printf("{\n");
        H(magic); H(abi_version); H(header_size); H(job_id); H(arch); H(role); H(rank);
        H(world_size); H(model_bytes); H(pid); H(file_size); H(start_time_ns); H(cc_name);
        H(total_iterations);
        C(seq); C(bytes_sent); C(bytes_received); C(iteration); C(iteration_start_ns);
        C(iteration_start_sent); C(last_iteration_bytes); C(last_update_ns);
        printf("\"FILE_SIZE\": %u, \"HEADER_SIZE\": %u}\n", MLCC_PROGRESS_FILE_SIZE, MLCC_PROGRESS_HEADER_SIZE);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "read")) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) return 2;
        const char *m = mmap(NULL, MLCC_PROGRESS_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) return 3;
        const struct mlcc_progress_header *h = (const void *)m;
        const struct mlcc_progress_counters *c = (const void *)(m + h->header_size);
        printf("{\"magic\": \"%.8s\", \"job_id\": \"%s\", \"arch\": %u, \"role\": %u, \"rank\": %u, "
               "\"world_size\": %u, \"model_bytes\": %llu, \"pid\": %u, \"file_size\": %u, "
               "\"cc_name\": \"%s\", \"total_iterations\": %llu, \"seq\": %llu, "
               "\"bytes_sent\": %llu, \"bytes_received\": %llu, \"iteration\": %llu, "
               "\"iteration_start_sent\": %llu, \"last_iteration_bytes\": %llu}\n",
               h->magic, h->job_id, h->arch, h->role, h->rank, h->world_size,
               (unsigned long long)h->model_bytes, h->pid, h->file_size, h->cc_name,
               (unsigned long long)h->total_iterations, (unsigned long long)c->seq,
               (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_received,
               (unsigned long long)c->iteration, (unsigned long long)c->iteration_start_sent,
               (unsigned long long)c->last_iteration_bytes);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "write")) {
        /* Leaves the file behind (no close): the Python reader reads it after we exit. */
        if (mlcc_progress_open_env(MLCC_ROLE_SERVER, 3) != 0) return 4;
        mlcc_iteration_begin();
        mlcc_progress_add(MLCC_DIR_SEND, 700);
        mlcc_progress_add(MLCC_DIR_RECV, 300);
        mlcc_iteration_begin();
        mlcc_progress_add(MLCC_DIR_SEND, 5);
        printf("%s\n", mlcc_progress_state_.path);
        return 0;
    }
    return 1;
}
"""


def compiler():
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@unittest.skipIf(compiler() is None, "no C compiler (cc, gcc or clang) to build the header's side")
class AgainstTheCHeader(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="mlcc-py-progress-")
        src = os.path.join(cls.tmp, "abi.c")
        with open(src, "w") as f:
            f.write(C_PROGRAM)
        cls.exe = os.path.join(cls.tmp, "abi")
        subprocess.run([compiler(), "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Werror", "-I",
                        HEADER_DIR, "-o", cls.exe, src], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def c(self, *args, env=None):
        out = subprocess.run([self.exe, *args], check=True, capture_output=True, text=True,
                             env=env)
        return out.stdout

    def test_every_offset_agrees_with_the_header(self):
        layout = json.loads(self.c("layout"))
        self.assertEqual(layout.pop("FILE_SIZE"), progress.FILE_SIZE)
        self.assertEqual(layout.pop("HEADER_SIZE"), progress.HEADER_SIZE)
        expected = {**progress.HEADER_OFFSETS, **progress.COUNTER_OFFSETS}
        self.assertEqual(layout, expected)

    def test_c_reads_what_python_writes(self):
        w = progress.ProgressWriter.open(
            "job-7", arch=progress.ARCH_PS, role=progress.ROLE_SERVER, rank=5, world_size=9,
            model_bytes=123456789, total_iterations=40, cc_name="mlcc", directory=self.tmp)
        self.assertTrue(w.active)
        w.iteration_begin()
        w.add(progress.DIR_SEND, 1000)
        w.add(progress.DIR_RECV, 400)
        w.iteration_begin()
        w.add(progress.DIR_SEND, 30)
        got = json.loads(self.c("read", w.path))
        self.assertEqual(got, {
            "magic": "MLCCPRG1", "job_id": "job-7", "arch": 2, "role": 1, "rank": 5,
            "world_size": 9, "model_bytes": 123456789, "pid": os.getpid(), "file_size": 512,
            "cc_name": "mlcc", "total_iterations": 40, "seq": 4, "bytes_sent": 1030,
            "bytes_received": 400, "iteration": 2, "iteration_start_sent": 1000,
            "last_iteration_bytes": 1000,
        })
        self.assertEqual(os.stat(w.path).st_mode & 0o777, 0o640)
        path = w.path
        w.close()
        self.assertFalse(os.path.exists(path), "close removes the file")

    def test_python_reads_what_c_writes(self):
        env = dict(os.environ, MLCC_JOB_ID="cjob", MLCC_JOB_ARCH="ps", MLCC_WORLD_SIZE="4",
                   MLCC_MODEL_BYTES="99", MLCC_TOTAL_ITERATIONS="12", MLCC_SHM_DIR=self.tmp,
                   MLCC_CC="reno")
        path = self.c("write", env=env).strip()
        p = progress.read(path)
        self.assertEqual(
            (p.job_id, p.arch, p.role, p.rank, p.world_size, p.model_bytes, p.total_iterations,
             p.cc_name, p.bytes_sent, p.bytes_received, p.iteration, p.iteration_start_sent,
             p.last_iteration_bytes),
            ("cjob", progress.ARCH_PS, progress.ROLE_SERVER, 3, 4, 99, 12, "reno", 705, 300, 2,
             700, 700))
        os.unlink(path)


class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mlcc-py-bad-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def inactive(self, **kw):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            w = progress.ProgressWriter.open(**kw)
        self.assertFalse(w.active)
        self.assertEqual(len(caught), 1, [str(c.message) for c in caught])
        self.assertIn("progress off", str(caught[0].message))
        # every call is a no-op, never an exception
        w.iteration_begin()
        w.add(progress.DIR_SEND, 10)
        self.assertEqual(w.snapshot(), b"")
        w.close()
        return w

    def test_bad_job_ids_are_refused(self):
        for bad in ["", "a b", "x" * 64, "../etc", "é"]:
            self.inactive(job_id=bad, directory=self.tmp)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_missing_directory_warns_once(self):
        self.inactive(job_id="j", directory=os.path.join(self.tmp, "nope"))

    def test_a_read_only_directory_warns_once(self):
        # sysfs refuses new files even to root, unlike a chmod'ed directory
        self.inactive(job_id="j", directory="/sys")

    def test_open_env_without_a_job_id_is_silent_and_inactive(self):
        env = os.environ.pop("MLCC_JOB_ID", None)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                w = progress.ProgressWriter.open_env()
            self.assertFalse(w.active)
            self.assertEqual(caught, [])
        finally:
            if env is not None:
                os.environ["MLCC_JOB_ID"] = env

    def test_torn_foreign_and_short_files_are_refused_with_reasons(self):
        w = progress.ProgressWriter.open("j", directory=self.tmp)
        good = w.snapshot()
        w.close()
        cases = {
            "size": good[:300],
            "magic": b"NOTMLCC!" + good[8:],
            "version": good[:8] + b"\x02\x00\x00\x00" + good[12:],
            "clean name": good[:16] + b"bad id\0" + good[23:],
            "odd sequence": good[:256] + b"\x01" + good[257:],
        }
        for why, data in cases.items():
            with self.assertRaises(progress.ProgressFormatError, msg=why) as e:
                progress.parse(data)
            self.assertIn(why, str(e.exception))

    def test_concurrent_writers_lose_no_bytes(self):
        w = progress.ProgressWriter.open("j", directory=self.tmp)
        threads = [threading.Thread(target=lambda: [w.add(progress.DIR_SEND, 3)
                                                    for _ in range(5000)]) for _ in range(4)]
        for t in threads:
            t.start()
        for _ in range(1000):
            w.iteration_begin()
        for t in threads:
            t.join()
        p = progress.read(w.path)
        self.assertEqual((p.bytes_sent, p.iteration), (4 * 5000 * 3, 1000))
        w.close()


if __name__ == "__main__":
    unittest.main()
