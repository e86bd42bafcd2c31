"""Never finishes importing (waits for a lock or a device that never comes)."""
import time

while True:
    time.sleep(0.1)
