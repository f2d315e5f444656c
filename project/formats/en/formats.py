"""How the admin writes dates and times: one format, sortable, with the zone.

Django's English default ("Nov. 26, 2026, 3:09 p.m.") is long, unsortable
by eye, and pushed the admin lists' time columns out of a 1280 px window;
the audit pages write ISO dates too. FORMAT_MODULE_PATH points here.
"""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
