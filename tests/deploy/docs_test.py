"""The README and docs/ link only inside the repository, to files that
exist, and say what a new user needs to know."""
import glob
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

PAGES = [os.path.join(h.REPO, "README.md"), *glob.glob(os.path.join(h.REPO, "docs", "*.md")),
         *glob.glob(os.path.join(h.REPO, "clients", "*", "README.md"))]


class DocsTest(unittest.TestCase):

    def test_links_stay_inside_the_repository_and_resolve(self):
        self.assertGreaterEqual(len(PAGES), 7)
        for page in PAGES:
            with open(page) as f:
                text = f.read()
            self.assertNotIn("shared/", text, page)
            for target in re.findall(r"\]\(([^)]+)\)", text):
                with self.subTest(page=page, target=target):
                    self.assertNotRegex(target, r"^[a-z]+://")
                    path = os.path.normpath(os.path.join(os.path.dirname(page),
                                                         target.split("#")[0]))
                    self.assertTrue(path.startswith(h.REPO + os.sep), path)
                    self.assertTrue(os.path.exists(path), path)

    def test_readme_says_what_a_new_user_needs(self):
        with open(PAGES[0]) as f:
            readme = f.read()
        self.assertIn("Metrics are off by default", readme)
        self.assertIn("random weights", readme)
        # A server is started before the first client example.
        self.assertLess(readme.index("build/bin/pagoda-server --model"),
                        readme.index("build/bin/pagoda-cli"))


if __name__ == "__main__":
    unittest.main()
