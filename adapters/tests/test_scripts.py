"""The adapters' shell scripts run as their pages show them: each setup and
campaign script (`adapters/<library>/*.sh`) is executable and names its
interpreter; the kits beside them (`adapters/*-kit.sh`) are sourced, not
run, and stay plain files.

    PYTHONPATH=python python3 -m unittest discover -s adapters/tests
"""

import glob
import os
import unittest

ADAPTERS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Scripts(unittest.TestCase):
    def test_each_adapter_script_runs_by_its_path(self):
        scripts = sorted(glob.glob(os.path.join(ADAPTERS, "*", "*.sh")))
        self.assertGreater(len(scripts), 10, "the adapters' scripts were not found")
        for script in scripts:
            name = os.path.relpath(script, os.path.dirname(ADAPTERS))
            with open(script) as f:
                self.assertEqual(f.readline().rstrip("\n"), "#!/usr/bin/env bash", name)
            self.assertTrue(os.access(script, os.X_OK), "%s is not executable (git update-index --chmod=+x)" % name)

    def test_kits_are_sourced(self):
        kits = sorted(glob.glob(os.path.join(ADAPTERS, "*-kit.sh")))
        self.assertEqual([os.path.basename(k) for k in kits], ["campaign-kit.sh", "setup-kit.sh"])
        for kit in kits:
            self.assertFalse(os.access(kit, os.X_OK), "%s is sourced by the scripts, not run" % kit)


if __name__ == "__main__":
    unittest.main()
