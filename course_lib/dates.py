"""The date-format task: human-written dates -> ISO dates (notebooks 03 and 08).

    date_pairs(3, seed=0) -> [("Wednesday, 3 March 2021", "2021-03-03"), ...]

Everything is generated in code from a seed. Dates run from 1950 to 2049, so a
two-digit year yy means 20yy when yy < 50 and 19yy otherwise. Numeric formats
with the year last are always day first (03/04/21 and 3.4.2021 are the 3rd of
April); 2021/04/03 puts the four-digit year first, then the month and the day.
"""
import datetime
import random

from course_lib.tokens import CharVocab

MONTHS = ["January", "February", "March", "April", "May", "June", "July",
          "August", "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FIRST_DAY = datetime.date(1950, 1, 1)
N_DAYS = (datetime.date(2049, 12, 31) - FIRST_DAY).days + 1


def _ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each format turns (date, month name, weekday name) into a string.
FORMATS = {
    "3 March 2021": lambda d, m, w: f"{d.day} {m} {d.year}",
    "03 Mar 2021": lambda d, m, w: f"{d.day:02d} {m[:3]} {d.year}",
    "Mar 3, 2021": lambda d, m, w: f"{m[:3]} {d.day}, {d.year}",
    "March 3, 2021": lambda d, m, w: f"{m} {d.day}, {d.year}",
    "MARCH 3 2021": lambda d, m, w: f"{m.upper()} {d.day} {d.year}",
    "3rd of March 2021": lambda d, m, w: f"{_ordinal(d.day)} of {m} {d.year}",
    "Wednesday, 3 March 2021": lambda d, m, w: f"{w}, {d.day} {m} {d.year}",
    "wed 3 mar 21": lambda d, m, w: f"{w[:3].lower()} {d.day} {m[:3].lower()} {d.year % 100:02d}",
    "03/03/21": lambda d, m, w: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}",
    "3.3.2021": lambda d, m, w: f"{d.day}.{d.month}.{d.year}",
    "2021/03/03": lambda d, m, w: f"{d.year}/{d.month:02d}/{d.day:02d}",
}


def format_date(date, fmt):
    """date: datetime.date; fmt: a key of FORMATS -> the human-written string."""
    return FORMATS[fmt](date, MONTHS[date.month - 1], WEEKDAYS[date.weekday()])


def _pairs(days, n, rng):
    pairs = []
    for _ in range(n):
        date = FIRST_DAY + datetime.timedelta(days=rng.choice(days))
        pairs.append((format_date(date, rng.choice(list(FORMATS))), date.isoformat()))
    return pairs


def date_pairs(n, seed=0):
    """n random (human-written date, 'YYYY-MM-DD') pairs, the same for the same seed."""
    return _pairs(range(N_DAYS), n, random.Random(seed))


def date_splits(n_train, n_test, seed=0, test_fraction=0.2):
    """Training and held-out pairs that share no calendar day.

    A fixed share of all days (test_fraction) is set aside for the held-out
    pairs, so the model is tested on dates it never saw in any format.
    returns (train_pairs, test_pairs), lists of (source, target)
    """
    rng = random.Random(seed)
    days = list(range(N_DAYS))
    rng.shuffle(days)
    n_held = int(test_fraction * N_DAYS)
    return _pairs(days[n_held:], n_train, rng), _pairs(days[:n_held], n_test, rng)


def date_vocab():
    """The character vocabulary of the task (sources and targets), the same every time."""
    year = [datetime.date(2021, 1, 1) + datetime.timedelta(days=i) for i in range(365)]
    texts = [format_date(d, f) for d in year for f in FORMATS] + ["0123456789-"]
    return CharVocab.from_texts(texts)
