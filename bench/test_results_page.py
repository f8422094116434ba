"""Unit tests of results_page.py (plain python3)."""
import unittest

import results_page as rp

RUNS = [{"engine": "SGLang 0.5.17", "model": "1.15 B Qwen2", "host": "H200", "date": "2026-11-28",
         "cold_s": 71.56, "first_s": 6.34, "cached_s": 2.36,
         "history": "SGLang 0.5.17, first run through Rekindle (2 × H200, 2026-11-28)"},
        {"engine": "CPU engine", "model": "2 GB", "host": "VM", "date": "2026-11-24",
         "cold_s": 2.83, "first_s": 5.52, "cached_s": 1.8, "first_note": "cold disk", "cached_note": "warm",
         "history": "CPU (VM)"}]


class Page(unittest.TestCase):
    def test_anchors_are_githubs(self):
        self.assertEqual(rp.slug(RUNS[0]["history"]), "sglang-0517-first-run-through-rekindle-2--h200-2026-11-28")
        self.assertEqual(rp.slug("vLLM 0.24.0, TP=2 with NCCL's SHM"), "vllm-0240-tp2-with-nccls-shm")

    def test_table_rows_and_ratio(self):
        t = rp.table(RUNS).splitlines()
        self.assertEqual(len(t), 4)
        self.assertIn("| 71.56 s | 6.34 s | **2.36 s** | 30.3x |", t[2])
        self.assertIn("5.52 s (cold disk) | **1.80 s** (warm) |", t[3])
        self.assertIn("(benchmarks-history.md#sglang-0517-first-run-through-rekindle-2--h200-2026-11-28)", t[2])

    def test_page_replaces_only_between_the_markers(self):
        text = f"# B\n\nbefore\n{rp.BEGIN}\nold table\n{rp.END}\nafter\n"
        out = rp.page(text, RUNS)
        self.assertTrue(out.startswith("# B\n\nbefore\n" + rp.BEGIN + "\n| engine"))
        self.assertTrue(out.endswith(rp.END + "\nafter\n"))
        self.assertNotIn("old table", out)
        self.assertEqual(rp.page(out, RUNS), out)
        with self.assertRaisesRegex(ValueError, "no results markers"):
            rp.page("# B\n", RUNS)

    def test_chart_has_a_bar_per_path_and_run(self):
        s = rp.svg(RUNS)
        for _, _, color in rp.PATHS:  # the legend's, and one per run
            self.assertEqual(s.count(f'fill="{color}"'), 1 + len(RUNS), color)
        self.assertIn(">71.6<", s)
        self.assertIn("SGLang 0.5.17, 1.15 B Qwen2", s)
        # log scale from 1 s to 100 s over 520 px: 71.56 s is 520 * log10(71.56) / 2 px long
        self.assertIn('width="482.2"', s)

    def test_missing_history_sections_are_named(self):
        self.assertEqual(rp.missing_anchors(RUNS, "## x\n### SGLang 0.5.17, first run through Rekindle (2 × H200, 2026-11-28)\n"),
                         ["CPU (VM)"])


if __name__ == "__main__":
    unittest.main()
