-- CreateTable
CREATE TABLE "jobs" (
    "id" BIGSERIAL NOT NULL,
    "payload" BYTEA NOT NULL,

    CONSTRAINT "jobs_pkey" PRIMARY KEY ("id")
);
