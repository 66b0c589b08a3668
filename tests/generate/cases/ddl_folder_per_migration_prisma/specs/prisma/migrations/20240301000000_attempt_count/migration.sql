-- AlterTable
ALTER TABLE "jobs" ALTER COLUMN "attempt" SET DEFAULT 1;
