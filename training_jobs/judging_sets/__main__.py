import sys

from training_jobs.judging_sets.build import main

sys.exit(main())
